"""run.json, typed: the parts its readers (``apply``'s recommendation) take from it.

The sweep writes run.json as a dict (``sweep.session``, ``sweep.driver``); a reader converts it
once, through :meth:`RunRecord.from_json`, which names a key of the wrong type. Keys a reader
does not take are not modelled (msgspec skips them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from powersweep.analysis.result_types import JsonRecord


@dataclass(frozen=True)
class RunGpu(JsonRecord):
    """A card the run measured (run.json ``gpus``)."""

    FILE: ClassVar[str] = "run.json"

    index: int | None = None
    name: str | None = None
    uuid: str | None = None


@dataclass(frozen=True)
class RunOptions(JsonRecord):
    """The options of the sweep as run.json records them (by flag name), those read back."""

    FILE: ClassVar[str] = "run.json"

    axis: str | None = None
    hold_cap_w: float | None = None
    sm_clock_min_mhz: float | None = None


@dataclass(frozen=True)
class RunSimulation(JsonRecord):
    """The simulated rig a run was measured on (run.json ``simulation``)."""

    FILE: ClassVar[str] = "run.json"

    profile: str | None = None
    node: str | None = None


@dataclass(frozen=True)
class UndervoltRecord(JsonRecord):
    """An undervolt search's own record of its answer (run.json ``undervolt``)."""

    FILE: ClassVar[str] = "run.json"

    cap_w: float | None = None
    sm_lock_mhz: float | None = None
    chosen_mhz: float | None = None


@dataclass(frozen=True)
class RunRecord(JsonRecord):
    """A run's run.json, typed (the parts read).

    Attributes:
        status: ``complete``, ``interrupted``, ``partial``, ``failed`` or ``running``.
        error: Why it ended, where it failed.
        axis: The axis swept, where recorded outside the options.
        observe_only: One point at the limit in force (nothing to recommend).
        gpus: The cards measured (None: not recorded).
        options: The sweep's options (None: not recorded).
        undervolt: An undervolt search's record (None: not an undervolt run).
        simulation: The simulated rig (None: a real card).
        caps_done: The caps measured (their count is what an unfinished run says).
        caps_planned: The caps planned.
        points_done: The points measured (clock and undervolt runs).
        points_planned: The points planned.
    """

    FILE: ClassVar[str] = "run.json"

    status: str | None = None
    error: str | None = None
    axis: str | None = None
    observe_only: bool | None = None
    gpus: list[RunGpu] | None = None
    options: RunOptions | None = None
    undervolt: UndervoltRecord | None = None
    simulation: RunSimulation | None = None
    caps_done: list[object] | None = None
    caps_planned: list[object] | None = None
    points_done: list[object] | None = None
    points_planned: list[object] | None = None
