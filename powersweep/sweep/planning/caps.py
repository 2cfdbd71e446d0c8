"""Which caps a sweep measures."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from powersweep.errors import UsageError
from powersweep.sweep.gpu import PowerEnvelope

FLOOR_FRACTION_OF_DEFAULT = 0.5


def uniform_envelope(envelopes: Sequence[PowerEnvelope]) -> PowerEnvelope:
    """The envelope every card of a set can take: the intersection of theirs.

    ``default_w`` and ``current_w`` are the lowest of the cards' (they only inform the floor and
    the summary).

    Raises:
        UsageError: The cards' envelopes do not overlap.
    """
    if not envelopes:
        raise UsageError("no GPUs selected")
    lo = max(e.min_w for e in envelopes)
    hi = min(e.max_w for e in envelopes)
    if lo > hi:
        raise UsageError(
            f"the selected GPUs share no power limit: highest minimum {lo:g} W is above "
            f"lowest maximum {hi:g} W; sweep them separately with --gpu"
        )
    return PowerEnvelope(
        min_w=lo,
        default_w=min(e.default_w for e in envelopes),
        max_w=hi,
        current_w=min(e.current_w for e in envelopes),
    )


def default_caps(envelope: PowerEnvelope, step_w: float = 10.0) -> list[float]:
    """Caps from the floor to the max limit in ``step_w`` steps.

    The floor is max(min limit, 50% of the default limit), rounded up to the step; the exact max
    limit is appended when the steps do not land on it.
    """
    if step_w <= 0:
        raise UsageError(f"--step-size must be positive, got {step_w:g}")
    floor = max(envelope.min_w, FLOOR_FRACTION_OF_DEFAULT * envelope.default_w)
    start = math.ceil(floor / step_w - 1e-9) * step_w
    caps: list[float] = []
    c = start
    while c <= envelope.max_w + 1e-9:
        caps.append(round(c, 3))
        c += step_w
    if not caps or caps[-1] < envelope.max_w - 1e-9:
        caps.append(float(envelope.max_w))
    return caps


def parse_caps(text: str) -> list[float]:
    """Parse ``--caps 260,280,300`` (values in W, optional ``W`` suffix).

    Raises:
        UsageError: Empty list or a value that is not a positive number.
    """
    values: list[float] = []
    for part in text.split(","):
        token = part.strip().rstrip("Ww").strip()
        if not token:
            continue
        try:
            value = float(token)
        except ValueError:
            raise UsageError(f"--caps: {part.strip()!r} is not a number of watts") from None
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"--caps: {part.strip()!r} must be a positive number of watts")
        values.append(value)
    if not values:
        raise UsageError("--caps is empty; give watts like --caps 260,280,300")
    return values


def clamp_caps(
    caps: Sequence[float],
    envelope: PowerEnvelope,
    warn: Callable[[str], None],
) -> list[float]:
    """Clamp requested caps into the envelope (with a warning each) and de-duplicate.

    The result is sorted ascending.
    """
    out: set[float] = set()
    for c in caps:
        clamped = min(max(c, envelope.min_w), envelope.max_w)
        if clamped != c:
            warn(
                f"cap {c:g} W is outside the envelope {envelope.min_w:g}-{envelope.max_w:g} W; "
                f"using {clamped:g} W"
            )
        out.add(round(clamped, 3))
    return sorted(out)
