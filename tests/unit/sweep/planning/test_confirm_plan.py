"""The confirm phase's plan: the best few caps tied with the best, and the record of why."""

from __future__ import annotations

from typing import Any

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.sweep.planning.confirm_plan import NO_USABLE_CAP, NOTHING_TIED, plan_confirm


def _tied_analysis(tied: list[float], tpw: dict[float, float], **sweet: Any) -> PowerAnalysis:
    best = max(tpw, key=lambda c: (tpw[c], -c))
    return PowerAnalysis.from_json(
        {
            "sweet_spot": {
                "cap_w": best,
                "tied_caps": tied,
                "interval_w": [min(tied), max(tied)],
                "noise_source": "resampled",
                **sweet,
            },
            "caps": [{"cap_w": c, "tps_per_w": v, "status": "ok"} for c, v in tpw.items()],
        }
    )


def _boot(share: dict[str, float]) -> dict[str, Any]:
    """A resampled sweet spot's bootstrap record, its shares given."""
    return {
        "resamples": 1000,
        "seed": 0,
        "caps_resampled": len(share),
        "tps_units": "tps_blocks",
        "best_share": share,
    }


def test_the_best_tied_caps_highest_first() -> None:
    tpw = {260.0: 0.100, 270.0: 0.1105, 280.0: 0.1110, 290.0: 0.1112, 300.0: 0.1101}
    analysis = _tied_analysis([270.0, 280.0, 290.0, 300.0], tpw)
    # by default the two best: each cap re-measured costs a window
    assert plan_confirm(analysis).caps_w == (290.0, 280.0)
    plan = plan_confirm(analysis, max_caps=3)
    assert plan.caps_w == (290.0, 280.0, 270.0)
    rec = plan.record
    assert rec["caps_w"] == [290.0, 280.0, 270.0] and rec["skipped"] is None
    assert rec["tied_before"] == [270.0, 280.0, 290.0, 300.0] and rec["best_before_w"] == 290.0
    assert "4 caps (270-300 W) were statistically tied with the best, 290 W" in rec["reason"]


def test_nothing_tied_or_nothing_usable_measures_nothing() -> None:
    plan = plan_confirm(_tied_analysis([290.0], {280.0: 0.1, 290.0: 0.2}))
    assert plan.caps_w == () and plan.record["skipped"] == NOTHING_TIED
    assert plan_confirm(None).record["skipped"] == NO_USABLE_CAP
    assert plan_confirm(PowerAnalysis()).record["skipped"] == NO_USABLE_CAP


def test_the_caps_most_often_best_go_first() -> None:
    # 370 W reads 9% lower, but one stalled block makes it best in a third of the resamples:
    # measuring it again settles more than measuring the quiet 300 W.
    tpw = {280.0: 0.1113, 290.0: 0.1119, 300.0: 0.1100, 370.0: 0.1020}
    share = {"280.0": 0.10, "290.0": 0.53, "300.0": 0.03, "370.0": 0.34}
    analysis = _tied_analysis([280.0, 290.0, 300.0, 370.0], tpw, bootstrap=_boot(share))
    assert plan_confirm(analysis, max_caps=3).caps_w == (370.0, 290.0, 280.0)
    assert plan_confirm(analysis).caps_w == (370.0, 290.0)
