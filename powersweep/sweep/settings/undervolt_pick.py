"""What an undervolt run (``--axis undervolt``) recommends setting: the power limit it held, the
SM clock lock and the SM clock offset of its ``chosen`` point.

The search has one answer (the largest offset that held, less its margin), so the
objectives of a power or clock run do not apply to it.

The reasoning: docs/undervolt.md, "powersweep.sweep.settings.undervolt_pick".
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from powersweep.analysis.run_record import RunOptions, RunRecord, UndervoltRecord
from powersweep.analysis.saved_analysis import SavedAnalysis, kind_of
from powersweep.analysis.undervolt_result_types import OffsetStep, UndervoltAnalysis, VersusCap
from powersweep.errors import PowersweepError, UsageError
from powersweep.runformat import as_float

UNDERVOLT = "undervolt"
# The objective an undervolt run's answer serves (the search maximises TPS/W at its lock).
_SAME_OBJECTIVE = "tps-per-w"
# An offset this close to 0 is the card's own curve.
_ZERO_MHZ = 0.5


@dataclass(frozen=True)
class UndervoltPick:
    """An undervolt run's answer, as ``apply`` sets it.

    Attributes:
        cap_w: The power limit the run held, W (None: the limit in force stays).
        sm_lock_mhz: The SM clock lock, MHz.
        sm_offset_mhz: The SM clock offset, MHz (None: no offset above 0 held; the lock and the
            limit are set alone).
        mem_offset_mhz: The memory clock offset of the search's memory phase, NVML's unit
            (None: no phase, or no memory offset above 0 held).
        tps_per_w: TPS/W at that point (None when unknown).
        tps: TPS at that point (None when unknown).
        notes: Caveats of the answer itself (no offset, not soaked, no better than the cap).
    """

    cap_w: float | None
    sm_lock_mhz: float
    sm_offset_mhz: float | None
    tps_per_w: float | None
    tps: float | None
    notes: tuple[str, ...] = ()
    mem_offset_mhz: float | None = None


def is_undervolt_run(run: RunRecord, analysis: SavedAnalysis, run_dir: Path) -> bool:
    """The run is an undervolt search (``--axis undervolt``).

    Raises:
        UsageError: ``run.json`` says undervolt but ``analysis.json`` is of another kind (made
            by an older analysis): applying it would set the wrong kind of answer.
    """
    if isinstance(analysis, UndervoltAnalysis):
        return True
    options = run.options or RunOptions()
    if options.axis == UNDERVOLT or run.axis == UNDERVOLT:
        raise UsageError(
            f"{run_dir} is an undervolt run but its analysis.json is of kind "
            f"{kind_of(analysis)!r}: run `powersweep analyze {run_dir}` again"
        )
    return False


def pick_undervolt(
    run_dir: Path, run: RunRecord, typed: UndervoltAnalysis, objective: str | None
) -> UndervoltPick:
    """An undervolt run's answer: its limit, SM lock and SM clock offset.

    Args:
        run_dir: The run directory.
        run: Its ``run.json``.
        typed: Its ``analysis.json``, typed.
        objective: What the user asked for (None or ``tps-per-w``: the answer; others refused).

    Raises:
        UsageError: Another objective, no answer, an answer without a valid lock, or an answer
            at offset 0 that does no better than the baseline cap (one line each).
    """
    if objective not in (None, _SAME_OBJECTIVE):
        raise UsageError(
            f"{run_dir} is an undervolt run: its search has one answer (the SM clock offset "
            f"that held at its locked clock), not a {objective} pick; apply it without "
            "--objective"
        )
    chosen = typed.chosen
    if chosen is None:
        raise UsageError(_no_answer(run_dir, typed))
    record = run.undervolt or UndervoltRecord()
    options = run.options or RunOptions()
    where = run_dir / "analysis.json"
    lock = _first(chosen.sm_lock_mhz, typed.sm_lock_mhz, record.sm_lock_mhz)
    if lock is None or lock <= 0:
        raise UsageError(f"{where}: the undervolt answer has no valid SM clock lock")
    offset = as_float(chosen.sm_offset_mhz, None)
    if offset is None:
        raise UsageError(f"{where}: the undervolt answer has no SM clock offset")
    cap = _first(chosen.cap_w, record.cap_w, options.hold_cap_w)
    cap = cap if cap is not None and cap > 0 else None
    measured = _measured(run_dir)
    _refuse_unless_measured(run_dir, (cap, lock, offset), measured, record)
    mem = _memory_offset(run_dir, typed, measured)
    applied = chosen
    if mem is not None and measured.memory is not None and measured.memory.chosen is not None:
        applied = measured.memory.chosen
    versus = typed.versus_cap or VersusCap()
    notes = []
    if abs(offset) <= _ZERO_MHZ:
        _refuse_unless_the_lock_beats_the_cap(run_dir, versus, cap)
        notes.append(
            "no SM clock offset above 0 held with the margin: only the SM clock lock "
            "and the power limit are set (the SM clock offset in force is left as it is)"
        )
    else:
        notes += _offset_notes(chosen, versus)
    return UndervoltPick(
        cap_w=cap,
        sm_lock_mhz=lock,
        sm_offset_mhz=offset if abs(offset) > _ZERO_MHZ else None,
        # the figures of the point applied: with its memory offset where the phase set one
        tps_per_w=as_float(applied.figures.tps_per_w, None),
        tps=as_float(applied.figures.tps, None),
        notes=tuple(notes),
        mem_offset_mhz=mem,
    )


def _measured(run_dir: Path) -> UndervoltAnalysis:
    """The search's answer derived again from the run's caps.csv and run.json alone.

    Raises:
        UsageError: The measurements cannot be read.
    """
    from powersweep.analysis.load import load_curve
    from powersweep.analysis.undervolt import analyze_undervolt

    try:
        return analyze_undervolt(load_curve(run_dir))
    except PowersweepError as exc:
        raise UsageError(
            f"{run_dir}'s measurements cannot be read ({exc}): nothing is applied that the run "
            "did not measure"
        ) from None


def _refuse_unless_measured(
    run_dir: Path,
    answer: tuple[float | None, float, float],
    measured: UndervoltAnalysis,
    record: UndervoltRecord,
) -> None:
    """Refuse an answer (cap, lock, offset) the run's own measurements do not give: an offset
    above the last one measured stable, one never measured stable at that lock (a negative one
    included), or any other disagreement with the answer derived from caps.csv and run.json.

    Raises:
        UsageError: One line naming the run, what its analysis.json says and what it measured.
    """
    cap, lock, offset = answer
    said = f"{run_dir / 'analysis.json'} answers SM {lock:g} MHz {offset:+g} MHz"
    again = f": nothing is applied; run `powersweep analyze {run_dir}` again"
    held = {
        round(float(s.sm_offset_mhz))
        for s in (*measured.steps, *measured.soaks)
        if s.figures.status == "ok" and s.sm_offset_mhz is not None and _same(s.sm_lock_mhz, lock)
    }
    last = as_float(measured.last_stable_mhz, None)
    if last is not None and offset > last + _ZERO_MHZ:
        raise UsageError(
            f"{said}, above the last offset its run measured stable ({last:+g} MHz)" + again
        )
    if round(offset) not in held:
        raise UsageError(f"{said}, an offset its run never measured stable at that lock" + again)
    derived = measured.chosen
    recorded = as_float(record.chosen_mhz, None)
    agrees = (
        derived is not None
        and _same(derived.sm_offset_mhz, offset)
        and _same(derived.sm_lock_mhz, lock)
        and (cap is None or derived.cap_w is None or _same(derived.cap_w, cap))
        and (recorded is None or _same(recorded, offset))
    )
    if not agrees:
        found = (
            f"SM {derived.sm_lock_mhz:g} MHz {derived.sm_offset_mhz or 0.0:+g} MHz at "
            f"{derived.cap_w:g} W"
            if derived is not None and derived.sm_lock_mhz is not None and derived.cap_w is not None
            else "no answer"
        )
        raise UsageError(
            f"{said}, but its caps.csv and run.json give {found}"
            + (f" (run.json records {recorded:+g} MHz)" if recorded is not None else "")
            + again
        )


def _memory_offset(
    run_dir: Path, analysis: UndervoltAnalysis, measured: UndervoltAnalysis
) -> float | None:
    """The memory phase's offset to set (None: no phase, or 0), as the run's own rows give it:
    analysis.json's must be that one.

    Raises:
        UsageError: analysis.json answers another memory offset than its rows do.
    """
    said = analysis.memory.chosen if analysis.memory is not None else None
    found = measured.memory.chosen if measured.memory is not None else None
    said_mhz = as_float(said.mem_offset_mhz, None) if said is not None else None
    found_mhz = as_float(found.mem_offset_mhz, None) if found is not None else None
    if (said_mhz is None) != (found_mhz is None) or (
        said_mhz is not None and not _same(said_mhz, found_mhz)
    ):
        what = f"memory {said_mhz:+g} MHz" if said_mhz is not None else "no memory offset"
        rows = f"memory {found_mhz:+g} MHz" if found_mhz is not None else "none"
        raise UsageError(
            f"{run_dir / 'analysis.json'} answers {what}, but its caps.csv and run.json give "
            f"{rows}: nothing is applied; run `powersweep analyze {run_dir}` again"
        )
    return found_mhz if found_mhz else None


def _same(a: float | None, b: float | None) -> bool:
    """Two settings that are one (a reading's rounding apart)."""
    return a is not None and b is not None and abs(a - b) <= _ZERO_MHZ


def _no_answer(run_dir: Path, analysis: UndervoltAnalysis) -> str:
    """Why an undervolt run has no ``chosen`` point, for the refusal."""
    first_bad, reason = as_float(analysis.first_unstable_mhz, None), analysis.first_unstable_reason
    seen = (
        f" (the first unstable step, {first_bad:+g} MHz: {reason})"
        if first_bad is not None and reason
        else ""
    )
    return (
        f"{run_dir}'s undervolt search has no answer: no point at its locked SM clock held"
        f"{seen}, so there is nothing to apply; see {run_dir / 'summary.md'}"
    )


def _refuse_unless_the_lock_beats_the_cap(
    run_dir: Path, versus: VersusCap, cap: float | None
) -> None:
    """At offset 0 the answer is the SM lock alone: worth setting only when it beats the
    baseline cap beyond noise (else the cap alone does as well, without a lock to keep).

    Raises:
        UsageError: It does not, or it was not compared.
    """
    gain, u95 = (
        as_float(versus.tps_per_w_gain_pct, None),
        as_float(versus.tps_per_w_gain_u95_pct, None),
    )
    if gain is not None and gain > 0 and versus.tied is False:
        return
    the_cap = f"the {cap:g} W cap" if cap is not None else "the power limit in force"
    if gain is None:
        compared = f"its SM clock lock alone was not compared with {the_cap}"
    else:
        spread = f" +-{u95:.1f}%" if u95 is not None else ""
        compared = (
            f"its SM clock lock alone does no better than {the_cap} ({gain:+.1f}%{spread} TPS/W)"
        )
    instead = (
        f"set the cap alone with `powersweep apply --cap {cap:g}`"
        if cap is not None
        else "keep the limit in force"
    )
    raise UsageError(
        f"no SM clock offset above 0 held in {run_dir}'s undervolt search and {compared}: "
        f"nothing is applied; {instead}"
    )


def _offset_notes(chosen: OffsetStep, versus: VersusCap) -> list[str]:
    """Caveats of an answer with an offset: not soaked, or no better than the cap."""
    out = []
    if chosen.reason != "soak":
        out.append(
            "the chosen offset was not soaked (no --soak-seconds run held it): a longer load may "
            "find it unstable"
        )
    gain, u95 = (
        as_float(versus.tps_per_w_gain_pct, None),
        as_float(versus.tps_per_w_gain_u95_pct, None),
    )
    cap = as_float(versus.cap_w, None)
    the_cap = f"the {cap:g} W cap's" if cap is not None else "the cap's"
    spread = f" +-{u95:.1f}%" if u95 is not None else ""
    if gain is not None and versus.tied:
        out.append(
            f"the undervolt point's TPS/W is within noise of {the_cap} ({gain:+.1f}%{spread}): "
            "the cap alone may do as well"
        )
    elif gain is not None and gain < 0:
        out.append(f"the undervolt point's TPS/W is below {the_cap} ({gain:+.1f}%{spread})")
    return out


def _first(*values: float | None) -> float | None:
    """The first finite number among ``values``."""
    for value in values:
        found = as_float(value, None)
        if found is not None:
            return found
    return None
