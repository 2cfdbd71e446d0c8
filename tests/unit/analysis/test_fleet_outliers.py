"""Fleet outlier detection on hand-made groups: spread alone flags nothing; each planted
departure is named by its cause."""

from __future__ import annotations

import numpy as np

from powersweep.analysis.fleet_outliers import MIN_CARDS_FOR_OUTLIERS, find_outliers

GRID = np.arange(200.0, 460.0, 20.0)
ENVELOPE = (150.0, 450.0, 600.0)


def _group(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    scale = 1.0 + rng.uniform(-0.03, 0.03, size=(n, 1))  # +-3% card-to-card spread
    power = np.minimum(GRID, 395.0)[None, :] * (1.0 + rng.uniform(-0.02, 0.02, size=(n, 1)))
    tps = 20.0 + 0.05 * np.minimum(GRID, 395.0)[None, :] * scale
    temp = 30.0 + 0.1 * power + rng.uniform(-3, 3, size=(n, 1))
    return {"tps": tps, "power": power, "temp": temp, "thr": np.zeros_like(tps)}


def _find(
    g: dict[str, np.ndarray],
    envelopes: list[tuple[float, float, float]] | None = None,
    throttle: list[float | None] | None = None,
) -> dict:
    n = g["tps"].shape[0]
    return find_outliers(
        [f"c{i}" for i in range(n)],
        envelopes or [ENVELOPE] * n,
        throttle or [None] * n,
        GRID,
        g["tps"],
        g["power"],
        g["temp"],
        g["thr"],
    )


def test_spread_alone_is_no_outlier() -> None:
    for seed in range(20):
        assert _find(_group(40, seed)) == {}


def test_each_planted_departure_is_named_by_its_cause() -> None:
    g = _group(40)
    g["temp"][3] += 20.0  # hot
    g["thr"][5, -4:] = 100.0  # throttles at the top caps, not hot
    g["tps"][7] *= 0.85  # slow
    g["power"][9] *= 1.10  # draws more
    envelopes = [ENVELOPE] * 40
    envelopes[11] = (150.0, 380.0, 380.0)
    throttle = [None] * 40
    throttle[5] = float(GRID[-4])
    found = _find(g, envelopes, throttle)
    assert {k: v[0]["code"] for k, v in found.items()} == {
        "c3": "hot",
        "c5": "throttling",
        "c7": "tps",
        "c9": "draw",
        "c11": "firmware_envelope",
    }
    assert "150/380/380 W vs the group's 150/450/600 W" in found["c11"][0]["message"]


def test_small_groups_have_no_outliers() -> None:
    g = _group(MIN_CARDS_FOR_OUTLIERS - 1)
    g["temp"][0] += 40.0
    assert _find(g) == {}
