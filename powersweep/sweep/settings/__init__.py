"""From an answer to a setting: what ``powersweep status`` reads and ``powersweep apply`` sets.

- ``recommendation``: the cap a run recommends (from its ``analysis.json``, or its CSVs
  re-analysed for another objective) and the GPUs it measured; ``undervolt_pick``: an undervolt
  run's one answer (cap, SM lock and SM clock offset).
- ``targets``: which GPUs of this machine a setting goes to: the run's cards matched by UUID
  (falling back to name and index), or the ones the user names.
- ``apply``: the plan (clamped to each card's envelope), its application with read-back and
  rollback, and the reset to defaults; ``clock_locks`` and ``clock_offsets`` plan, write and undo
  the clock locks and the SM clock offset the same way.
- ``status``: a read-only snapshot of every GPU's settings and readings.
- ``unit``: the systemd unit that re-applies the settings at boot: render, install, remove.

It may import the GPU protocol (``sweep.gpu``), the restore journal (``sweep.records.journal``),
``powersweep.analysis`` and the base modules; never the simulator or the CLI. The backend is
injected by the composition root (``powersweep.cli.rigs``).
"""
