"""What a run's evidence lets its analysis claim: an answer, a boundary, or none.

The reasoning: docs/figures.md, "powersweep.analysis.claims".
"""

from __future__ import annotations

from powersweep.analysis.result_types import Answer
from powersweep.analysis.run_record import RunRecord

# A best point needs a measured point on each side of it: three at least.
MIN_ANSWER_POINTS = 3
ANSWER = "answer"
BOUNDARY = "boundary"
NONE = "none"
# Run statuses that leave the measurement unfinished.
UNFINISHED = ("interrupted", "partial", "failed", "running")


def status_reason(run: RunRecord | None, source: str, what: str = "caps") -> str | None:
    """Why the run's own status withholds an answer, and what gives one (None: complete, or a
    bare curve, which has no status to judge by): :func:`status_claim` in one line (the answer's
    ``why``, which the summary and the headline print after "no answer:")."""
    claim = status_claim(run, source, what)
    return None if claim is None else "; ".join(claim)


def status_claim(run: RunRecord | None, source: str, what: str = "caps") -> tuple[str, str] | None:
    """``(why, remedy)``: why the run's own status withholds an answer, and what would give one.

    Args:
        run: run.json (None for a bare CSV).
        source: The run directory, named in the command that measures the rest.
        what: ``caps``, ``points``, or ``steps`` (an undervolt search, planned as it goes).
    """
    status = run.status if run is not None else None
    if run is None or status not in UNFINISHED:
        return None
    if what == "steps":
        # a search plans its steps as it goes: only what it measured counts
        steps = len(run.points_done or [])
        why = "interrupted" if status == "interrupted" else f"the run ended {status}"
        return (
            f"{why} after {steps} steps of the search",
            f"`powersweep --resume {source}` goes on from its last stable step",
        )
    done, planned = _counts(run, what)
    counted = f" after {done} of {planned} {what}" if done is not None and planned else ""
    left = done is None or planned is None or done < planned
    if left:
        remedy = f"`powersweep --resume {source}` measures the rest"
    elif status == "failed":
        # every planned point was tried (a failed one counts as done): resuming measures none
        remedy = f"sweep again once the cause is fixed (`--resume` would measure no {what})"
    else:
        remedy = f"measure at least {MIN_ANSWER_POINTS} {what} that finish ok" + (
            " (`--caps`, or the whole envelope)" if what == "caps" else ""
        )
    if status == "interrupted":
        return f"interrupted{counted}", remedy
    if status == "running":
        return (
            f"the run did not finish{counted} (run.json still says running: it was killed, or "
            "is still going)",
            remedy,
        )
    error = run.error
    return f"the run ended {status}{counted if left else ''}{f': {error}' if error else ''}", remedy


def _counts(run: RunRecord, what: str) -> tuple[int | None, int | None]:
    """How many points the run finished and planned (None where it does not say)."""
    if what == "caps":
        done, planned = run.caps_done, run.caps_planned
    else:
        done, planned = run.points_done, run.points_planned
    if done is None or planned is None:
        return None, None
    return len(done), len(planned)


def answer_of(
    *,
    status_why: str | None,
    usable: int,
    binds_why: str | None = None,
    boundary_why: str | None = None,
    what: str = "caps",
) -> Answer:
    """The analysis' ``answer``.

    ``kind`` is ``answer`` (the best point has a measured point on each side), ``boundary``
    (it is the first or last measured: ``why`` says so) or ``none`` (``why`` says what withholds
    it: the run's status first, then too few points, then caps that never bind).
    """
    why = status_why
    if why is None and usable < MIN_ANSWER_POINTS:
        why = (
            f"only {usable} usable {what if usable != 1 else what.rstrip('s')}: an answer needs "
            f"at least {MIN_ANSWER_POINTS}, a measured one on each side of the best"
        )
    why = why or binds_why
    if why is not None:
        return Answer(NONE, why, usable)
    if boundary_why is not None:
        return Answer(BOUNDARY, boundary_why, usable)
    return Answer(ANSWER, None, usable)
