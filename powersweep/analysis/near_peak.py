"""The near-peak cap: the lowest cap that keeps TPS within a given loss of the best.

The reasoning: docs/precision.md, "powersweep.analysis.near_peak".
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from powersweep.analysis.cap_points import Region


def region_groups(caps_w: Sequence[float], regions: Iterable[Region]) -> list[tuple[int, int]]:
    """``(first, last)`` indices into ``caps_w`` (sorted) of each region's measured caps."""
    out = []
    for r in regions:
        inside = [k for k, c in enumerate(caps_w) if r.start_w - 1e-6 <= c <= r.end_w + 1e-6]
        if inside:
            out.append((inside[0], inside[-1]))
    return out


def judged_tps(tps: Sequence[float], groups: Sequence[tuple[int, int]]) -> list[float]:
    """Each cap's TPS as the near-peak rule judges it: a region's caps by their median.

    On a boost plateau or a draw ceiling the card runs one operating point at every cap (the
    same clocks, the same draw), so its caps' TPS differ only by noise: their median is that
    operating point measured several times over.
    """
    out = list(tps)
    for first, last in groups:
        level = statistics.median(tps[first : last + 1])
        out[first : last + 1] = [level] * (last + 1 - first)
    return out


def near_peak_index(
    tps: Sequence[float], groups: Sequence[tuple[int, int]], max_loss_pct: float
) -> int:
    """Index of the near-peak cap among caps sorted ascending, given each cap's TPS.

    The near-peak cap is the lowest cap from which every cap up to the best-TPS cap keeps at
    least ``(1 - max_loss_pct / 100)`` of the best TPS, the caps of a plateau or ceiling judged
    together (:func:`judged_tps`). Throughput never falls when the cap rises, so a cap reading
    above that floor below one reading under it is noise: taking the first cap above the floor
    would pick the luckiest of several near-floor readings, and whether a sweep measured that
    cap would move the answer by a plateau's width. Caps above the best (a hot top end) do not
    count.

    Args:
        tps: TPS of each cap, caps sorted ascending (at least one).
        groups: ``(first, last)`` indices of each plateau or ceiling (:func:`region_groups`).
        max_loss_pct: TPS the near-peak cap may lose against the best.

    Returns:
        The index into ``tps`` of the near-peak cap.
    """
    judged = judged_tps(tps, groups)
    best = max(range(len(judged)), key=lambda k: (judged[k], -k))
    floor = judged[best] * (1.0 - max_loss_pct / 100.0)
    k = best
    while k > 0 and judged[k - 1] >= floor:
        k -= 1
    return k
