"""The undervolt search's steps (issues 36, 45): the baseline cap, then offsets up from 0 at one
locked SM clock until the first unstable step, then 15 MHz steps between the last stable and the
first unstable one, then the chosen offset's soak, all in MHz.

The reasoning: docs/undervolt.md, "powersweep.sweep.planning.undervolt_steps".
"""

from __future__ import annotations

import bisect
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from powersweep.runformat import as_float
from powersweep.sweep.planning.memory_steps import MemoryPlan, MemorySearch
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.planning.soaks import SoakLadder

Batch = list[tuple[SweepPoint, str]]
BASELINE = "baseline"
REFERENCE = "reference"
SEARCH = "search"
REFINE = "refine"
DONE = "done"
# A failed step the world may have failed (:attr:`~..measurement.stability.Verdict.retry`) is
# measured once more ("retry"), after offset 0 is read again ("rebase") where its TPS fell;
# at most this many a search, so a noisy world cannot keep it going.
RETRY = "retry"
REBASE = "rebase"
MAX_RETRIES = 3
# Where no supported clock is listed, a lock lands on the 15 MHz grid every NVIDIA card's
# clocks sit on; offsets move the voltage/frequency curve in the same bins, so the search refines
# its edge and places its answer on it.
CLOCK_GRID_MHZ = 15.0
# A measured clock within this below a supported one is taken as that clock (a reading's
# rounding); a median between two bins (a clock dithering under the cap) takes the lower bin,
# which the cap held the card at or above.
SNAP_TOLERANCE_MHZ = 1.0


@dataclass(frozen=True)
class ResumeFrom:
    """Where an interrupted search stands (``--resume``), from its own rows and record.

    Attributes:
        lock_mhz: The SM lock it searched at.
        last_stable_mhz: The highest offset that held below every one that did not.
        first_unstable_mhz: The lowest offset that did not hold, or that was set when the run
            died (None: none).
        killed_at_mhz: The offset set when the run died, if that was its end (None: it ended
            otherwise, or at offset 0).
        mem_killed_at_mhz: The memory offset set when the run died in the memory phase (the
            phase stays below it).
    """

    lock_mhz: float
    last_stable_mhz: float
    first_unstable_mhz: float | None
    killed_at_mhz: float | None = None
    mem_killed_at_mhz: float | None = None


@dataclass(frozen=True)
class UndervoltPlan:
    """What the undervolt search steps.

    Attributes:
        cap_w: The baseline cap (the best cap to compare with); held at every step.
        lock_mhz: The SM clock to lock (None: the clock the card holds at the baseline cap).
        sm_clocks_mhz: The SM clocks the card supports (where a measured clock is snapped).
        step_mhz: The coarse step between offsets, which finds the edge.
        max_mhz: The highest offset to try.
        margin_mhz: MHz the answer stays below the last stable offset.
        soak_s: Run seconds the chosen offset is held before it is measured once more.
        resume: Where an interrupted search stands (None: a new search).
        memory: The memory phase at the answer (None: the memory offset is left alone).
    """

    cap_w: float
    lock_mhz: float | None
    sm_clocks_mhz: tuple[float, ...]
    step_mhz: float
    max_mhz: float
    margin_mhz: float
    soak_s: float
    resume: ResumeFrom | None = None
    memory: MemoryPlan | None = None

    @property
    def max_steps(self) -> int:
        """Coarse offsets the search may step to above 0."""
        return max(0, math.floor(self.max_mhz / self.step_mhz + 1e-9))

    @property
    def refine_steps(self) -> int:
        """Grid offsets between the last stable coarse step and the first unstable one."""
        return max(0, math.ceil(self.step_mhz / CLOCK_GRID_MHZ - 1e-9) - 1)

    @property
    def max_soaks(self) -> int:
        """Soaks at most: each failed one backs off by the margin (one grid bin at least)."""
        return math.floor(self.max_mhz / max(self.margin_mhz, CLOCK_GRID_MHZ) + 1e-9) + 1

    @property
    def max_points(self) -> int:
        """Every point the search may measure: the baseline, offset 0, the coarse steps, the
        grid steps between the edge's two, the retries (each with its re-base) and the soaks."""
        memory = self.memory.max_points if self.memory is not None else 0
        return 2 + self.max_steps + self.refine_steps + 2 * MAX_RETRIES + self.max_soaks + memory

    @property
    def likely_points(self) -> int:
        """The points a search that meets no retry measures where its coarse steps hold to the
        top: the baseline, offset 0, the coarse and grid steps, one soak, and the memory phase's
        offset 0, steps and soak. What a progress bar expects before the edge is found (the
        edge ends the steps sooner; retries and failed soaks add points)."""
        memory = 2 + self.memory.max_steps if self.memory is not None else 0
        return 2 + self.max_steps + self.refine_steps + 1 + memory


def snap_lock(measured_mhz: float, supported: Sequence[float]) -> float | None:
    """The lock for a measured SM clock: the highest supported clock not above it (within
    :data:`SNAP_TOLERANCE_MHZ`), else the 15 MHz grid's (None: no clock was measured)."""
    if not (math.isfinite(measured_mhz) and measured_mhz > 0):
        return None
    clocks = sorted(c for c in supported if c > 0)
    if not clocks:
        return math.floor(measured_mhz / CLOCK_GRID_MHZ + 1e-9) * CLOCK_GRID_MHZ
    i = bisect.bisect_right(clocks, measured_mhz + SNAP_TOLERANCE_MHZ)
    return clocks[max(0, i - 1)]


class UndervoltSchedule:
    """One step at a time: the baseline, offset 0 (the reference), then up by the coarse step
    while each holds, then up the 15 MHz grid from the last stable step to the first unstable
    one; the answer is the last stable offset less the margin, on the grid, soaked.

    Args:
        plan: The search.
        status_of: A measured point's status (``ok``, ``unstable``, ``failed``...; None: not
            measured), its latest reading's.
        retry_of: Why a failed step may be the world's (``stretch``, ``server``; empty: the
            offset's).
    """

    def __init__(
        self,
        plan: UndervoltPlan,
        status_of: Callable[[SweepPoint], str | None],
        retry_of: Callable[[SweepPoint], str] = lambda _p: "",
    ) -> None:
        self.plan = plan
        self.status_of = status_of
        self.retry_of = retry_of
        self.retried: list[tuple[float, str]] = []
        self.baseline = SweepPoint(plan.cap_w, sm_offset_mhz=0.0)
        self.lock_mhz = plan.lock_mhz if plan.resume is None else plan.resume.lock_mhz
        # a resumed search has its baseline: it takes offset 0's answers again, then goes on
        self._stage = BASELINE if plan.resume is None else REFERENCE
        # the point set now, written to run.json before it is measured: a run that dies under
        # it leaves it on record, never to be tried again (--resume)
        self.in_flight: dict[str, Any] | None = None
        # the memory phase at the answer, once the driver starts it
        self.memory: MemorySearch | None = None
        self._resumed = False
        self._at_mhz = 0.0
        self.last_stable_mhz: float | None = None
        self.first_unstable_mhz: float | None = None
        self.ended = ""
        self.ladder = SoakLadder(max(plan.margin_mhz, CLOCK_GRID_MHZ), _grid_floor)
        self.refined: tuple[float, float] | None = None

    def at(self, mhz: float) -> SweepPoint:
        """The point of offset ``mhz`` at the locked clock."""
        return SweepPoint(self.plan.cap_w, self.lock_mhz, None, mhz)

    def next(self, measured: Mapping[SweepPoint, Mapping[str, Any]]) -> Batch:
        """The next step (empty: the search is over)."""
        batch = self._next(measured)
        self.set_in_flight(*batch[-1] if batch else (None, ""))
        return batch

    def _next(self, measured: Mapping[SweepPoint, Mapping[str, Any]]) -> Batch:
        if self._stage == BASELINE:
            self._stage = REFERENCE
            return [(self.baseline, BASELINE)]
        if self._stage == REFERENCE:
            return self._reference(measured)
        if self._stage not in (SEARCH, REFINE):
            return []
        status = self.status_of(self.at(self._at_mhz))
        resume = self.plan.resume
        if status == "ok" and resume is not None and not self._resumed:
            # offset 0's answers taken again: on from where the interrupted search stood
            self._resumed = True
            self.last_stable_mhz, self._at_mhz = resume.last_stable_mhz, resume.last_stable_mhz
            self.first_unstable_mhz = resume.first_unstable_mhz
            return self._up()
        if status == "ok":
            self.last_stable_mhz = self._at_mhz
            return self._up()
        if (again := self._retry()) is not None:
            return again
        if self._at_mhz == 0:
            self.ended = f"offset 0 itself was {status or 'not measured'}: nothing to search from"
        else:
            self.first_unstable_mhz = self._at_mhz
            self.ended = f"{self.at(self._at_mhz).label()} was {status}"
            if self._stage == SEARCH and self._refine_from() is not None:
                return self._up()
        self._stage = DONE
        return []

    def _retry(self) -> Batch | None:
        """The failed step once more where the world may have failed it: after offset 0 read
        again where its TPS fell (the check then judges it against that reading), as it was
        where the server failed it. Once a step, :data:`MAX_RETRIES` a search (None: no)."""
        step = self.at(self._at_mhz)
        kind = self.retry_of(step)
        done = {mhz for mhz, _ in self.retried}
        if not kind or self._at_mhz in done or len(self.retried) >= MAX_RETRIES:
            return None
        self.retried.append((self._at_mhz, kind))
        if kind == "stretch":
            return [(self.at(0.0), REBASE), (step, RETRY)]
        return [(step, RETRY)]

    def _reference(self, measured: Mapping[SweepPoint, Mapping[str, Any]]) -> Batch:
        self._stage = SEARCH
        if self.lock_mhz is None:
            row = measured.get(self.baseline)
            clock = float(row.get("sm_clock_mhz", math.nan)) if row else math.nan
            self.lock_mhz = snap_lock(clock, self.plan.sm_clocks_mhz)
        if self.lock_mhz is None:
            self.ended = "the baseline cap gave no SM clock to lock (it failed): give --sm-clocks"
            return []
        return [(self.at(0.0), REFERENCE)]

    def _refine_from(self) -> float | None:
        """The first grid offset above the last stable one, where it lies below the first
        unstable one (None: the coarse step was the grid's)."""
        if self.last_stable_mhz is None or self.first_unstable_mhz is None:
            return None
        nxt = _grid_floor(self.last_stable_mhz) + CLOCK_GRID_MHZ
        return nxt if nxt < self.first_unstable_mhz - 1e-9 else None

    def _up(self) -> Batch:
        """The next offset up: the coarse step, or the grid's between the edge's two steps."""
        if self.first_unstable_mhz is not None:
            nxt = self._refine_from()
            if nxt is None:
                self._stage = DONE
                return []
            if self._stage == SEARCH:
                self.refined = (self.last_stable_mhz or 0.0, self.first_unstable_mhz)
            self._stage, self._at_mhz = REFINE, nxt
            return [(self.at(nxt), REFINE)]
        nxt = self._at_mhz + self.plan.step_mhz
        if nxt <= self.plan.max_mhz + 1e-9:
            self._at_mhz = nxt
            return [(self.at(nxt), SEARCH)]
        self.ended = f"reached the highest offset, {self._at_mhz:+g} MHz"
        self._stage = DONE
        return []

    def set_in_flight(self, point: SweepPoint | None, reason: str) -> None:
        """Record ``point`` as the one about to be set, where it moves an offset above 0
        (offset 0 is the card's own curve: no risk to record)."""
        sm, mem = (point.sm_offset_mhz or 0.0, point.mem_offset_mhz) if point else (0.0, None)
        if point is None or (sm <= 0 and not mem):
            self.in_flight = None
            return
        self.in_flight = {"sm_offset_mhz": sm, "reason": reason}
        if mem is not None:
            self.in_flight["mem_offset_mhz"] = mem

    @property
    def chosen_mhz(self) -> float | None:
        """The answer, once its soak held (or none was needed)."""
        return self.ladder.chosen_mhz

    @property
    def soaks(self) -> list[tuple[float, str]]:
        """Each soak's offset and status."""
        return self.ladder.soaks

    def soak(self) -> SweepPoint | None:
        """The next offset to soak (None: no soak is left): the last stable offset less the
        margin, on the grid, first (:class:`~.soaks.SoakLadder`)."""
        if self._stage != DONE or self.last_stable_mhz is None:
            return None
        mhz = self.ladder.next(
            self.last_stable_mhz - self.plan.margin_mhz,
            lambda o: self.status_of(self.at(o)) == "ok",
            self.plan.soak_s,
        )
        if mhz is None:
            self.in_flight = None
            return None
        self.set_in_flight(self.at(mhz), "soak")
        return self.at(mhz)

    def soaked(self, status: str) -> None:
        """Take the soak's status: ok chooses its offset, anything else backs off by the margin
        again (one grid bin at least)."""
        self.ladder.took(status)

    def record(self) -> dict[str, Any] | None:
        """``run.json``'s ``undervolt``: the lock, the steps' outcome and the chosen offset."""
        return {
            "cap_w": self.plan.cap_w,
            "sm_lock_mhz": self.lock_mhz,
            "step_mhz": self.plan.step_mhz,
            "grid_mhz": CLOCK_GRID_MHZ,
            "max_mhz": self.plan.max_mhz,
            "margin_mhz": self.plan.margin_mhz,
            "soak_s": self.plan.soak_s,
            "last_stable_mhz": self.last_stable_mhz,
            "first_unstable_mhz": self.first_unstable_mhz,
            "refined_between_mhz": list(self.refined) if self.refined else None,
            "retried": [{"sm_offset_mhz": o, "why": w} for o, w in self.retried],
            "chosen_mhz": self.chosen_mhz,
            "in_flight": self.in_flight,
            "memory": self.memory.record() if self.memory is not None else None,
            "resumed_from": dataclasses.asdict(self.plan.resume) if self.plan.resume else None,
            "soaks": [{"sm_offset_mhz": o, "status": s} for o, s in self.soaks],
            "ended": self.ended,
        }


def resume_from(record: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> ResumeFrom | None:
    """Where an interrupted search stands, from its run.json ``undervolt`` record and its
    caps.csv rows (as read, strings or numbers): each offset at its lock judged by its latest
    row, and the offset set when the run died, which its last row does not answer, taken as
    unstable (it may have killed the machine; it is never tried again). None: no lock yet (the
    search starts again from its baseline).
    """
    lock = as_float(record.get("sm_lock_mhz"), None)
    if lock is None:
        return None
    latest: dict[float, str] = {}
    last: tuple[float, str] | None = None
    mem_last: tuple[float, str] | None = None
    for row in rows:
        offset, at = (
            as_float(row.get("sm_offset_mhz"), None),
            as_float(row.get("sm_lock_mhz"), None),
        )
        if offset is None or at is None or abs(at - lock) > SNAP_TOLERANCE_MHZ:
            continue
        mem = as_float(row.get("mem_offset_mhz"), None)
        if mem is not None:  # the memory phase's: its SM offset held already
            mem_last = (mem, str(row.get("reason") or ""))
            last = None
            continue
        latest[offset] = str(row.get("status") or "")
        last = (offset, str(row.get("reason") or ""))
        mem_last = None
    bad = {o for o, status in latest.items() if status != "ok" and o > 0}
    flight = record.get("in_flight")
    killed = mem_killed = None
    if isinstance(flight, Mapping):
        offset, mem = (
            as_float(flight.get("sm_offset_mhz"), None),
            as_float(flight.get("mem_offset_mhz"), None),
        )
        reason = str(flight.get("reason"))
        if mem is not None and mem_last != (mem, reason):
            mem_killed = mem
        elif mem is None and offset is not None and offset > 0 and last != (offset, reason):
            killed = offset
            bad.add(offset)
    first_bad = min(bad) if bad else None
    held = [o for o, s in latest.items() if s == "ok" and (first_bad is None or o < first_bad)]
    return ResumeFrom(lock, max(held, default=0.0), first_bad, killed, mem_killed)


def _grid_floor(mhz: float) -> float:
    """``mhz`` down to the 15 MHz grid (offsets move the curve in its bins)."""
    return math.floor(mhz / CLOCK_GRID_MHZ + 1e-9) * CLOCK_GRID_MHZ
