"""``--resume``: continue an interrupted run directory from its first unfinished cap."""

from __future__ import annotations

import csv
import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from powersweep.errors import UsageError
from powersweep.runformat import SCHEMA_VERSION
from powersweep.sweep.gpu import Gpu
from powersweep.sweep.options import ServerOptions, SweepOptions
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.writer import RunWriter


@dataclass(frozen=True)
class ResumeState:
    """Where an interrupted run stands: its ``run.json``, its reopened writer, and its caps.

    Attributes:
        meta: The run's ``run.json``.
        writer: The run directory, reopened for appending.
        caps_left: Planned caps not yet done.
        caps_done: Caps already done.
        points_left: Clock points not yet done (a clock sweep; empty on the power axis).
        points_done: Clock points already done.
        cap_status: The last status caps.csv holds for each cap done (a failed one is tried
            again at the end of the resumed sweep; the run's status counts them all).
    """

    meta: dict[str, Any]
    writer: RunWriter
    caps_left: list[float]
    caps_done: list[float]
    points_left: list[SweepPoint] = dataclasses.field(default_factory=list)
    points_done: list[SweepPoint] = dataclasses.field(default_factory=list)
    cap_status: dict[float, str] = dataclasses.field(default_factory=dict)


def resume_options(run_dir: Path, given: SweepOptions) -> tuple[SweepOptions, dict[str, Any]]:
    """The options of an interrupted run (from its ``run.json``) for ``--resume``.

    The URL and API key given now win (the run never stored credentials); so do
    ``--state-dir``, ``--force`` and ``--out`` is the run's parent.

    Raises:
        UsageError: Not a run directory, a newer schema, or a run that is complete.
    """
    path = run_dir / "run.json"
    try:
        meta = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"--resume: {run_dir} is not a run directory (no run.json)") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"--resume: cannot read {path}: {exc}") from None
    if not isinstance(meta, dict) or not isinstance(meta.get("options"), dict):
        raise UsageError(f"--resume: {path} is not a powersweep run.json")
    version = meta.get("schema_version")
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        raise UsageError(
            f"--resume: {path} has schema_version {version!r}; this powersweep knows "
            f"{SCHEMA_VERSION} (upgrade powersweep)"
        )
    if meta.get("status") == "complete":
        raise UsageError(f"--resume: {run_dir} is complete; nothing to resume")
    recorded = dict(meta["options"])
    # the GPUs the run picked, not a fresh pick (prepare_resume checks they are the same cards)
    picked = [g.get("index") for g in meta.get("gpus", []) if isinstance(g, dict)]
    if picked and all(isinstance(i, int) for i in picked):
        recorded["gpus"], recorded["all_gpus"] = picked, False
    try:
        options = SweepOptions.from_recorded(recorded)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"--resume: {path} has unusable options ({exc})") from None
    options = dataclasses.replace(
        options,
        output=dataclasses.replace(options.output, out=run_dir.parent, resume=run_dir),
        server=ServerOptions(
            url=given.server.url or options.server.url,
            model=given.server.model or options.server.model,
            api_key=given.server.api_key,
        ),
        safety=dataclasses.replace(
            options.safety,
            state_dir=given.safety.state_dir,
            force=given.safety.force,
            dry_run=False,
        ),
    )
    return options, meta


def prepare_resume(options: SweepOptions, meta: dict[str, Any], gpus: list[Gpu]) -> ResumeState:
    """Check that the GPUs are the run's and find the caps still to measure.

    Raises:
        UsageError: Another GPU set, or nothing left to measure.
    """
    assert options.output.resume is not None
    want = [g.get("uuid") for g in meta.get("gpus", []) if isinstance(g, dict)]
    have = [g.identity().uuid for g in gpus]
    if want != have:
        raise UsageError(
            f"--resume: the run was on GPUs {', '.join(map(str, want))}, this sweep would use "
            f"{', '.join(have)}; resume needs the same GPU set"
        )
    if isinstance(meta.get("undervolt"), dict):
        # a search's steps follow from its rows (UndervoltAxis.resumed): nothing planned is left
        return ResumeState(meta, RunWriter.reopen(options.output.resume), [], [])
    if isinstance(meta.get("points_planned"), list):
        planned_points = [SweepPoint.from_dict(p) for p in meta["points_planned"]]
        done_points = [SweepPoint.from_dict(p) for p in meta.get("points_done") or []]
        left_points = [p for p in planned_points if p not in done_points]
        if not left_points:
            raise UsageError(f"--resume: every planned point of {options.output.resume} is done")
        caps = [float(c) for c in meta.get("caps_planned", [])]
        return ResumeState(
            meta, RunWriter.reopen(options.output.resume), caps, [], left_points, done_points
        )
    planned = [float(c) for c in meta.get("caps_planned", [])]
    done = [float(c) for c in meta.get("caps_done", [])]
    left = [c for c in planned if c not in done]
    if not left:
        raise UsageError(f"--resume: every planned cap of {options.output.resume} is done")
    writer = RunWriter.reopen(options.output.resume)
    return ResumeState(
        meta, writer, left, done, cap_status=_cap_status(options.output.resume / "caps.csv", done)
    )


def _cap_status(path: Path, done: list[float]) -> dict[float, str]:
    """Last status per cap in caps.csv, for the caps run.json says are done."""
    out: dict[float, str] = {}
    try:
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                try:
                    cap = float(row.get("cap_w") or "nan")
                except ValueError:
                    continue
                if cap in done:
                    out[cap] = (row.get("status") or "ok").strip() or "ok"
    except OSError:
        return {}
    return out
