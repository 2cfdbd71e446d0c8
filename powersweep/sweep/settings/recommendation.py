"""The cap (or, for a clock run, the clock locks; for an undervolt run, the lock and SM clock
offset) a run recommends, and the GPUs it measured, read from its run directory."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from powersweep.analysis import claims
from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint
from powersweep.analysis.objectives import OBJECTIVES
from powersweep.analysis.result_types import CapRow, Pick, PowerAnalysis, known
from powersweep.analysis.run_record import RunRecord
from powersweep.analysis.saved_analysis import SavedAnalysis, typed_analysis
from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import SCHEMA_VERSION, JsonMap, as_float
from powersweep.sweep.settings.undervolt_pick import UNDERVOLT, is_undervolt_run, pick_undervolt

# The objectives a clock run answers (its peak, near-peak, the latency target's pick).
_CLOCK_OBJECTIVES = ("tps-per-w", "near-peak", "slo")


@dataclass(frozen=True)
class MeasuredGpu:
    """A GPU a run measured, as its ``run.json`` names it.

    Attributes:
        index: NVML index at the time of the run.
        name: Marketing name.
        uuid: Stable identifier; None when the run did not record it.
    """

    index: int
    name: str
    uuid: str | None


@dataclass(frozen=True)
class Recommendation:
    """What a run recommends setting.

    Attributes:
        run_dir: The run directory.
        objective: ``tps-per-w``, ``near-peak``, ``cost``, ``slo``, or ``undervolt`` (an
            undervolt run's one answer).
        cap_w: The recommended power limit per GPU, W; for a clock or undervolt run, the limit
            it held (``--cap``), or None when it left the limit in force alone.
        tps_per_w: TPS/W at that setting (None when unknown).
        tps: TPS at that setting (None when unknown).
        gpus: The GPUs the run measured.
        notes: Caveats the user should see (an interrupted run, a cap at the sweep's edge).
        sm_clock_mhz: A clock run's SM lock, MHz (None: not locked, or a power run).
        mem_clock_mhz: A clock run's memory lock, MHz (None: not locked, or a power run).
        sm_offset_mhz: An undervolt run's SM clock offset, MHz (None: none to set).
        mem_offset_mhz: A memory clock offset, MHz in NVML's unit (None: none to set; issue 45,
            carried through for the analysis that will find one).
        sm_clock_min_mhz: The run's ``--sm-clock-min`` (None: it recorded none; a lock then
            takes the card's idle floor).
    """

    run_dir: Path
    objective: str
    cap_w: float | None
    tps_per_w: float | None
    tps: float | None
    gpus: tuple[MeasuredGpu, ...]
    notes: tuple[str, ...] = ()
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    sm_offset_mhz: float | None = None
    mem_offset_mhz: float | None = None
    sm_clock_min_mhz: float | None = None

    @property
    def clock_run(self) -> bool:
        """The run swept clock locks: the recommendation is a lock, not a cap."""
        return self.sm_clock_mhz is not None or self.mem_clock_mhz is not None

    def describe(self) -> str:
        """``290 W per GPU``, ``SM 1410 MHz, memory 9751 MHz at 300 W per GPU`` or
        ``SM 2790 MHz +180 MHz offset, +1000 MHz memory offset at 450 W per GPU``."""
        mem = [f"{self.mem_offset_mhz:+g} MHz memory offset"] if self.mem_offset_mhz else []
        if not self.clock_run:
            return ", ".join([f"{self.cap_w:g} W per GPU", *mem])
        offset = f" {self.sm_offset_mhz:+g} MHz offset" if self.sm_offset_mhz is not None else ""
        locks = [
            f"{what} {mhz:g} MHz" + (offset if what == "SM" else "")
            for what, mhz in (("SM", self.sm_clock_mhz), ("memory", self.mem_clock_mhz))
            if mhz is not None
        ]
        held = f" at {self.cap_w:g} W per GPU" if self.cap_w is not None else ""
        return ", ".join(locks + mem) + held


def read_recommendation(
    run_dir: Path,
    objective: str | None = None,
    *,
    eta: float = 0.5,
    max_ttft_ms: float | None = None,
    max_itl_ms: float | None = None,
) -> Recommendation:
    """Read the cap a run recommends for an objective.

    Without ``objective`` it is the recommendation ``analysis.json`` holds (what the summary
    told the user). ``tps-per-w`` and ``near-peak`` come from ``analysis.json``; ``cost``, unless
    that is the objective ``analysis.json`` was made for, re-analyses the run's CSVs in memory
    (nothing is written). ``slo`` is the most efficient point whose measured p95 latencies meet
    the targets: those given here (the CSVs analysed again in memory), else the ones
    ``analysis.json`` was made with (``powersweep analyze --max-itl-ms``).

    An undervolt run (``--axis undervolt``) has one answer, its ``chosen`` point: the cap it held,
    its SM lock and its SM clock offset (:mod:`.undervolt_pick`); an objective other than
    ``tps-per-w`` is refused.

    Args:
        run_dir: A run directory with ``run.json`` and ``analysis.json``.
        objective: ``tps-per-w``, ``near-peak``, ``cost``, ``slo`` or None.
        eta: Weight of energy in the ``cost`` objective.
        max_ttft_ms: ``slo``: the target for the time to first token's p95.
        max_itl_ms: ``slo``: the target for the inter-token latency's p95.

    Raises:
        UsageError: Not a run directory, no analysis, no recommendation, a run that does not
            say which GPU it measured, or another objective for an undervolt run.
    """
    analysis_path, run_path = _run_files(run_dir)
    analysis = typed_analysis(_read_json(analysis_path))
    run = read_run(run_path)
    if run.observe_only:
        raise UsageError(
            f"{run_dir} is an --observe-only run (one cap, the limit in force): it recommends "
            "no cap"
        )
    _refuse_without_answer(run, analysis, run_dir)
    gpus = _measured_gpus(run, run_path)
    is_undervolt_run(run, analysis, run_dir)  # refuses an undervolt run analysed as another
    if isinstance(analysis, UndervoltAnalysis):
        return _undervolt_recommendation(run_dir, run, analysis, objective, gpus)
    chosen = objective or _analysed_objective(analysis)
    slo = _slo_point(run_dir, analysis, max_ttft_ms, max_itl_ms) if chosen == "slo" else None
    if isinstance(analysis, ClockAnalysis):
        return _clock_recommendation(run_dir, run, analysis, chosen, gpus, slo)
    _refuse_if_no_cap_binds(analysis, run_dir)
    pick = _pick(analysis, chosen, run_dir, eta, slo)
    if pick is None:
        raise UsageError(
            f"{analysis_path} holds no {chosen} recommendation (no cap finished with status ok?): "
            f"see {run_dir / 'summary.md'}"
        )
    cap_w = as_float(pick.cap_w, None)
    if cap_w is None or cap_w <= 0:
        raise UsageError(f"{analysis_path}: the {chosen} recommendation has no valid cap_w")
    figures = pick.figures if isinstance(pick, CapRow) else pick
    return Recommendation(
        run_dir=run_dir,
        objective=chosen,
        cap_w=cap_w,
        tps_per_w=as_float(figures.tps_per_w, None),
        tps=as_float(figures.tps, None),
        gpus=gpus,
        notes=_notes(analysis, chosen),
        sm_clock_min_mhz=_sm_clock_min(run),
    )


def _refuse_without_answer(run: RunRecord, analysis: SavedAnalysis, run_dir: Path) -> None:
    """A run that did not finish, or whose analysis found no answer, sets nothing.

    The run's status is read from its own run.json, whatever analysis.json says.

    Raises:
        UsageError: One line: why there is no answer, and what would give one.
    """
    undervolt = is_undervolt_run(run, analysis, run_dir)
    what = "steps" if undervolt else "points" if isinstance(analysis, ClockAnalysis) else "caps"
    claim = claims.status_claim(run, str(run_dir), what)
    why = None if claim is None else "; ".join(claim)
    if why is None:
        answer = known(analysis.answer)
        if answer is not None and answer.kind == claims.NONE:
            why = answer.why or "the analysis found no answer"
            if "no cap binds" in why:
                return  # said by the caps' own refusal, with the lever to pull instead
    if why is not None:
        raise UsageError(f"{run_dir} has no answer to apply: {why}")


def _refuse_if_no_cap_binds(analysis: PowerAnalysis, run_dir: Path) -> None:
    """A run whose caps never bound has no cap to apply: every cap in it draws the same.

    Raises:
        UsageError: The analysis says no cap binds (one line: the draw, the caps, the lever).
    """
    binds = known(analysis.power_cap_binds)
    if binds is None or binds.binds is not False:
        return
    draw, caps = binds.draw_w or [None, None], binds.caps_w or [None, None]
    seen = (
        f": the card drew {draw[0]:.0f}-{draw[1]:.0f} W under caps of {caps[0]:g}-{caps[1]:g} W"
        if None not in (*draw, *caps)
        else ""
    )
    raise UsageError(
        f"no cap binds in {run_dir}{seen}, so no cap saves energy for this load and none is "
        "applied; lock clocks instead: `powersweep --axis sm-clock`, then `powersweep apply` "
        "that run"
    )


def _run_files(run_dir: Path) -> tuple[Path, Path]:
    """``analysis.json`` and ``run.json`` of a run directory (both must exist)."""
    if not run_dir.is_dir():
        raise UsageError(f"{run_dir} is not a run directory")
    analysis_path = run_dir / "analysis.json"
    if not analysis_path.is_file():
        raise UsageError(
            f"{run_dir} has no analysis.json: run `powersweep analyze {run_dir}` first"
        )
    run_path = run_dir / "run.json"
    if not run_path.is_file():
        raise UsageError(
            f"{run_dir} has no run.json, so it does not say which GPU it measured: set the cap "
            "by name instead (powersweep apply --cap W --gpus N)"
        )
    return analysis_path, run_path


def _clock_recommendation(
    run_dir: Path,
    run: RunRecord,
    analysis: ClockAnalysis,
    objective: str,
    gpus: tuple[MeasuredGpu, ...],
    slo: CapRow | LockPoint | None,
) -> Recommendation:
    """A clock run's pick: its efficiency peak (``tps-per-w``), its ``near-peak`` point or the
    latency target's pick (``slo``), with the power limit the run held (``--cap``), if it held
    one."""
    where = run_dir / "analysis.json"
    if objective not in _CLOCK_OBJECTIVES:
        raise UsageError(
            f"{run_dir} is a clock run: it recommends clock locks for tps-per-w, near-peak or "
            f"slo, not {objective}"
        )
    pick: LockPoint | None
    if objective == "slo":
        pick = slo if isinstance(slo, LockPoint) else None
    else:
        pick = analysis.sweet_spot if objective == "tps-per-w" else analysis.near_peak
    if pick is None:
        raise UsageError(
            f"{where} holds no {objective} clock recommendation (no point finished with status "
            f"ok?): see {run_dir / 'summary.md'}"
        )
    sm, mem = as_float(pick.sm_lock_mhz, None), as_float(pick.mem_lock_mhz, None)
    if (sm is None and mem is None) or any(v is not None and v <= 0 for v in (sm, mem)):
        raise UsageError(f"{where}: the {objective} recommendation has no valid clock lock")
    held = as_float(run.options.hold_cap_w, None) if run.options is not None else None
    return Recommendation(
        run_dir=run_dir,
        objective=objective,
        cap_w=held if held is not None and held > 0 else None,
        tps_per_w=as_float(pick.figures.tps_per_w, None),
        tps=as_float(pick.figures.tps, None),
        gpus=gpus,
        sm_clock_mhz=sm,
        mem_clock_mhz=mem,
        sm_clock_min_mhz=_sm_clock_min(run),
    )


def _undervolt_recommendation(
    run_dir: Path,
    run: RunRecord,
    analysis: UndervoltAnalysis,
    objective: str | None,
    gpus: tuple[MeasuredGpu, ...],
) -> Recommendation:
    """An undervolt run's one answer (:func:`~.undervolt_pick.pick_undervolt`): the limit it
    held, its SM lock and its SM clock offset, with the run's caveats first."""
    pick = pick_undervolt(run_dir, run, analysis, objective)
    return Recommendation(
        run_dir=run_dir,
        objective=UNDERVOLT,
        cap_w=pick.cap_w,
        tps_per_w=pick.tps_per_w,
        tps=pick.tps,
        gpus=gpus,
        notes=pick.notes,
        sm_clock_mhz=pick.sm_lock_mhz,
        sm_offset_mhz=pick.sm_offset_mhz,
        mem_offset_mhz=pick.mem_offset_mhz,
        sm_clock_min_mhz=_sm_clock_min(run),
    )


def _slo_point(
    run_dir: Path,
    analysis: PowerAnalysis | ClockAnalysis,
    max_ttft_ms: float | None,
    max_itl_ms: float | None,
) -> CapRow | LockPoint:
    """The latency target's pick: the targets given (the CSVs analysed again in memory), else
    the ones analysis.json holds.

    Raises:
        UsageError: No target anywhere, or no measured point meets the targets.
    """
    target = analysis.latency_target
    if max_ttft_ms is not None or max_itl_ms is not None:
        from powersweep.analysis import load_curve
        from powersweep.analysis.serving import ServingOptions
        from powersweep.sweep.axes import AnalysisSettings, axis_of

        curve = load_curve(run_dir)
        targets = ServingOptions(max_ttft_ms=max_ttft_ms, max_itl_ms=max_itl_ms)
        fresh = axis_of(curve).analyze(curve, AnalysisSettings(serving=targets, bootstrap=0))
        target = fresh.latency_target if isinstance(fresh, PowerAnalysis | ClockAnalysis) else None
    if target is None:
        raise UsageError(
            "--objective slo needs a latency target: give --max-itl-ms and/or --max-ttft-ms "
            f"(or run `powersweep analyze {run_dir} --max-itl-ms MS` first)"
        )
    point = target.point
    if not target.met or point is None:
        closest = known(target.name)
        misses = "; ".join(target.misses or [])
        raise UsageError(
            f"no measured point of {run_dir} meets the latency target"
            + (f" (the closest, {closest}, misses it: {misses})" if closest else "")
            + ": loosen the target or measure higher caps"
        )
    return point


def _analysed_objective(analysis: PowerAnalysis | ClockAnalysis) -> str:
    """The objective analysis.json was made for (a clock run's: its peak)."""
    rec = analysis.recommendation if isinstance(analysis, PowerAnalysis) else None
    made_for = known(rec.objective) if rec is not None else None
    return made_for if made_for in OBJECTIVES and made_for is not None else "tps-per-w"


def _pick(
    analysis: PowerAnalysis,
    objective: str,
    run_dir: Path,
    eta: float,
    slo: CapRow | LockPoint | None,
) -> Pick | CapRow | None:
    """A power run's pick for ``objective`` (``slo``: the latency target's point)."""
    rec = analysis.recommendation
    if (
        rec is not None
        and known(rec.objective) == objective
        and (objective != "cost" or known(rec.eta) == eta)
    ):
        return rec
    if objective == "tps-per-w":
        return analysis.sweet_spot
    if objective == "near-peak":
        return analysis.near_peak
    if objective == "slo":
        return slo if isinstance(slo, CapRow) else None
    if objective != "cost":
        raise UsageError(f"unknown objective {objective!r}")
    # The cost objective depends on eta: analyse the run's CSVs again, in memory.
    from powersweep import analysis as analysis_pkg

    fresh = analysis_pkg.analyze(
        analysis_pkg.load_curve(run_dir), objective="cost", eta=eta, bootstrap=0
    )
    return fresh.recommendation


def _measured_gpus(run: RunRecord, path: Path) -> tuple[MeasuredGpu, ...]:
    if not run.gpus:
        raise UsageError(f"{path} lists no GPUs: set the cap by name (powersweep apply --cap W)")
    gpus = []
    for g in run.gpus:
        if g.index is None:
            raise UsageError(f"{path}: a GPU entry without an index: {g.to_json()!r}")
        gpus.append(MeasuredGpu(index=g.index, name=g.name or "", uuid=g.uuid or None))
    return tuple(gpus)


def _notes(analysis: PowerAnalysis, objective: str) -> tuple[str, ...]:
    notes = []
    sweet = analysis.sweet_spot
    at_boundary = known(sweet.at_boundary) if sweet is not None else None
    if objective == "tps-per-w" and at_boundary:
        edge = "lowest" if at_boundary == "low" else "highest"
        notes.append(
            f"the sweet spot is the {edge} cap measured: the best cap may lie beyond the sweep"
        )
    return tuple(notes)


def read_run(path: Path) -> RunRecord:
    """A run's run.json, typed.

    Raises:
        UsageError: It cannot be read, is not a JSON object, or a key holds the wrong type.
        PowersweepError: A newer powersweep wrote it.
    """
    return RunRecord.from_json(_read_json(path))


def _sm_clock_min(run: RunRecord) -> float | None:
    """The run's ``--sm-clock-min``, where it recorded one above 0."""
    low = run.options.sm_clock_min_mhz if run.options is not None else None
    return low if low is not None and low > 0 else None


def _read_json(path: Path) -> JsonMap:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise UsageError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a JSON object")
    version = data.get("schema_version", SCHEMA_VERSION)
    if isinstance(version, int) and version > SCHEMA_VERSION:
        raise PowersweepError(
            f"{path}: written by a newer powersweep (schema_version {version} > "
            f"{SCHEMA_VERSION}); upgrade powersweep to read it",
            exit_code=2,
        )
    return data
