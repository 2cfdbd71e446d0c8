"""Outliers of a fleet group: cards whose curve, draw or temperature departs from the others,
each named with its likely cause (a different firmware envelope, a hot card, thermal throttling,
lower TPS, different draw or efficiency).

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_outliers".
"""

from __future__ import annotations

import math
import warnings
from collections import Counter
from collections.abc import Sequence

import numpy as np

# Outliers need a group to depart from.
MIN_CARDS_FOR_OUTLIERS = 5
# A card departs when its robust z-score passes Z_OUTLIER and the departure is also larger
# than the floor (so a fleet of near-identical cards does not flag measurement noise).
Z_OUTLIER = 5.0
HOT_FLOOR_C = 8.0
TPS_FLOOR = 0.04
DRAW_FLOOR = 0.04
TPW_FLOOR = 0.04
THROTTLE_PCT = 20.0


def _robust_flags(values: np.ndarray, floor: float) -> np.ndarray:
    """Cards whose value departs from the group's median by more than Z_OUTLIER robust sigmas
    and more than ``floor`` (a signed departure: both directions)."""
    finite = np.isfinite(values)
    if finite.sum() < MIN_CARDS_FOR_OUTLIERS:
        return np.zeros(len(values), dtype=bool)
    med = np.median(values[finite])
    sigma = 1.4826 * np.median(np.abs(values[finite] - med))
    dev = np.abs(values - med)
    with np.errstate(invalid="ignore"):
        return finite & (dev > floor) & (dev > Z_OUTLIER * sigma)


def find_outliers(
    labels: Sequence[str],
    envelopes: Sequence[tuple[float, float, float]],
    throttle_from_w: Sequence[float | None],
    grid: np.ndarray,
    tps: np.ndarray,
    power: np.ndarray,
    temp: np.ndarray,
    thr: np.ndarray,
    *,
    unit: str = "W",
) -> dict[str, list[dict[str, str]]]:
    """Cards that depart from their group, each with its likely causes (most likely first).

    Args:
        labels: Each card's name.
        envelopes: Each card's (min, default, max) limit, W.
        throttle_from_w: Each card's lowest cap with thermal throttling, or None.
        grid: The group's settings: caps, W (or clock locks, MHz, on a clock axis).
        tps, power, temp, thr: Cards x settings: TPS, draw, hottest reading and % of samples
            thermally throttled (NaN where a card did not measure a setting).
        unit: The settings' unit in the messages (``W`` or ``MHz``).

    Returns:
        Label to causes (``{code, message}``) for the cards that depart; empty for groups of
        fewer than :data:`MIN_CARDS_FOR_OUTLIERS` cards.
    """
    n = len(labels)
    if n < MIN_CARDS_FOR_OUTLIERS:
        return {}
    envelope = Counter(envelopes).most_common(1)[0][0]
    with np.errstate(all="ignore"):
        tpw = tps / power
    with np.errstate(all="ignore"), warnings.catch_warnings():
        # a card with a smaller envelope has no value at the upper caps: NaN, not a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        med_tps = np.nanmedian(tps, axis=0)
        med_power = np.nanmedian(power, axis=0)
        med_tpw = np.nanmedian(tpw, axis=0)
        med_temp = np.nanmedian(temp, axis=0)
        d_temp = np.nanmedian(temp - med_temp, axis=1)
        d_power = np.nanmedian(power / med_power - 1.0, axis=1)
        d_tpw = np.nanmedian(tpw / med_tpw - 1.0, axis=1)
        # TPS is compared where the cap does not bind everyone alike: the upper half of the grid
        upper = grid >= np.median(grid)
        d_tps = np.nanmedian(tps[:, upper] / med_tps[upper] - 1.0, axis=1)
    throttled = np.nanmax(np.where(np.isfinite(thr), thr, 0.0), axis=1) >= THROTTLE_PCT
    group_throttles = throttled.mean() >= 0.25
    hot = _robust_flags(d_temp, HOT_FLOOR_C) & (d_temp > 0)
    low_tps = _robust_flags(d_tps, TPS_FLOOR)
    draw = _robust_flags(d_power, DRAW_FLOOR)
    eff = _robust_flags(d_tpw, TPW_FLOOR)
    out: dict[str, list[dict[str, str]]] = {}
    for i, label in enumerate(labels):
        causes: list[dict[str, str]] = []
        own = envelopes[i]
        if own != envelope and all(math.isfinite(x) for x in own):
            causes.append(
                {
                    "code": "firmware_envelope",
                    "message": "different firmware envelope: min/default/max "
                    f"{_ws(own)} vs the group's {_ws(envelope)}",
                }
            )
        thr_from = throttle_from_w[i]
        if hot[i]:
            text = f"hot card: {d_temp[i]:+.0f} °C against the group at the same caps"
            if thr_from is not None:
                text += f", thermal throttling from {thr_from:.0f} {unit}"
            causes.append({"code": "hot", "message": text + " (check airflow, fans, paste)"})
        elif throttled[i] and not group_throttles and thr_from is not None:
            causes.append(
                {
                    "code": "throttling",
                    "message": f"thermal throttling from {thr_from:.0f} {unit} while the group "
                    "does not (slowdown threshold or sensor)",
                }
            )
        # a hot or throttling card's lower draw and TPS are its heat's doing, not other causes
        explained = bool(causes) and causes[-1]["code"] in ("hot", "throttling")
        if low_tps[i]:
            causes.append(
                {
                    "code": "tps",
                    "message": f"{d_tps[i] * 100:+.1f}% TPS against the group at the upper "
                    + ("caps" if unit == "W" else "locks"),
                }
            )
        if draw[i] and not explained:
            causes.append(
                {
                    "code": "draw",
                    "message": f"draws {d_power[i] * 100:+.1f}% against the group at the same "
                    + ("caps" if unit == "W" else "locks")
                    + " (silicon leakage, fans, or a different power reading)",
                }
            )
        if eff[i] and not explained:
            causes.append(
                {
                    "code": "efficiency",
                    "message": f"{d_tpw[i] * 100:+.1f}% TPS/W against the group (silicon, "
                    "memory clocks or a different server set-up)",
                }
            )
        if causes:
            out[label] = causes
    return out


def _ws(envelope: Sequence[float]) -> str:
    return "/".join(f"{x:.0f}" for x in envelope) + " W"
