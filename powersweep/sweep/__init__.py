"""The sweep: everything that runs while the card is being measured.

One subpackage per concern: ``gpu`` (the GPU protocol and its backends), ``server`` (the HTTP
client of OpenAI-compatible servers), ``loads`` (the load modes), ``sampling`` (sampler, settle,
per-cap figures), ``planning`` (which caps), ``records`` (run directory, restore journal, file
ownership). At this level: ``options`` (what a sweep is asked), ``plan`` (GPU choice, caps, dry
run), ``resume``, ``rig`` (what a sweep runs on), ``session`` (options to run directory) and
``driver`` (the cap loop that always restores). The sweep may import ``powersweep.analysis`` and
the base modules, never ``powersweep.sim`` or ``powersweep.cli``: the rig is handed in.
"""
