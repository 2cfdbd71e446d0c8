"""powersweep.analysis.serving_summary: the summary's energy-and-cost section (J/token and kWh per
1M tokens at the pick, what it saves or costs against the reference, money with a tariff) and its
latency-target section (a target met with or without a margin, missed, or not measurable)."""

from __future__ import annotations

from powersweep.analysis.result_types import (
    CapLatencyTarget,
    CapRow,
    Energy,
    EnergyFigures,
    PointFigures,
)
from powersweep.analysis.serving_summary import energy_section, latency_section


def _energy(**kw: object) -> Energy:
    base: dict[str, object] = {
        "tariff_per_kwh": None,
        "chosen": EnergyFigures(
            j_per_token=8.123456, j_per_token_u95_pct=0.4812, kwh_per_mtok=2.25651, tps=32.26
        ),
        "reference": EnergyFigures(j_per_token=9.5, kwh_per_mtok=2.638889),
        "kwh_saved_per_mtok": 0.38238,
        "kwh_saved_per_year": 389.123,
        "chosen_name": "290 W",
        "reference_name": "370 W",
    }
    return Energy(**{**base, **kw})  # type: ignore[arg-type]


def test_no_energy_no_section() -> None:
    assert energy_section(None, "the default limit") == ""
    assert latency_section(None) == ""


def test_energy_section_states_the_pick_and_its_saving() -> None:
    assert energy_section(_energy(), "the default limit") == (
        "### Energy and cost\n"
        "\n"
        "- At the recommendation (290 W): **8.123 J/token** ±0.48%, 2.257 kWh per 1M tokens "
        "(energy counter over the seconds the TPS counts, as TPS/W: a request's time to first "
        "token and the gaps between requests are not in a decode figure; ± its own 95% "
        "precision).\n"
        "- Against the default limit (370 W: 9.5 J/token, 2.639 kWh per 1M tokens) it saves "
        "0.382 kWh per 1M tokens and 389 kWh a year, serving the measured load around the clock "
        "at its 32.26 TPS.\n\n"
    )


def test_a_tariff_prices_the_pick_and_a_negative_saving_is_a_cost() -> None:
    text = energy_section(
        _energy(
            tariff_per_kwh=0.3,
            chosen=EnergyFigures(j_per_token=8.0, kwh_per_mtok=2.2, cost_per_mtok=0.66, tps=30.0),
            kwh_saved_per_mtok=-0.5,
            kwh_saved_per_year=-1500.0,
            cost_saved_per_mtok=-0.15,
            cost_saved_per_year=-4500.4,
        ),
        "the fastest point",
    )
    assert "2.2 kWh per 1M tokens (0.66 per 1M tokens at 0.3/kWh)" in text
    assert (
        "it costs 0.5 kWh per 1M tokens and 1.5e+03 kWh a year (0.15 per 1M tokens, 4,500 a "
        "year)" in text
    )


def test_an_unmeasured_reference_has_no_savings_and_names_default_in_words() -> None:
    text = energy_section(
        Energy(chosen=EnergyFigures(j_per_token=float("nan")), reference=None), "the default limit"
    )
    assert text == (
        "### Energy and cost\n"
        "\n"
        "- At the recommendation (the recommendation): **— J/token**, — kWh per 1M tokens "
        "(energy counter over the seconds the TPS counts, as TPS/W: a request's time to first "
        "token and the gaps between requests are not in a decode figure; ± its own 95% "
        "precision).\n"
        "- The default limit was not measured: no savings figure.\n\n"
    )


POINT = CapRow(
    cap_w=290.0,
    figures=PointFigures(tps_per_w=0.1114, j_per_token=8.97, ttft_p95_ms=212.3, itl_p95_ms=31.04),
)


def test_a_target_met_with_a_margin_names_the_point_and_its_ties() -> None:
    target = CapLatencyTarget(
        max_ttft_ms=250.0,
        max_itl_ms=35.0,
        met=True,
        point=POINT,
        name="290 W",
        tied=["290 W", "300 W", "a|b"],
        noise_source="bootstrap",
        margin=True,
    )
    assert latency_section(target) == (
        "### Latency target\n"
        "\n"
        "Target: time to first token p95 ≤ 250 ms and inter-token latency p95 ≤ 35 ms (each "
        "point's own p95).\n"
        "\n"
        "- Most efficient point that meets it with a margin (its p95s' own 95% bounds meet it "
        "too): **290 W** (0.1114 TPS/W, 8.97 J/token, TTFT p95 212.3 ms, inter-token p95 31.04 "
        "ms).\n"
        "- Tied with it within noise (TPS/W, bootstrap): 300 W, a\\|b.\n\n"
    )


def test_a_target_met_only_within_noise_says_so() -> None:
    base = {"max_itl_ms": 35.0, "met": True, "point": POINT, "name": "290 W", "margin": False}
    alone = latency_section(CapLatencyTarget(**base, unsure=["ITL p95 34.9 ms"]))  # type: ignore[arg-type]
    assert "Target: inter-token latency p95 ≤ 35 ms (each point's own p95)." in alone
    assert "meets it: **290 W**" in alone
    assert (
        "- **It meets the target only within its own noise**: ITL p95 34.9 ms; no point meets it "
        "with a margin (longer windows sharpen a p95)." in alone
    )
    assert "- Tied with it within noise (TPS/W, None): none." in alone
    better = latency_section(
        CapLatencyTarget(**{**base, "margin": True}, within_noise="280 W", unsure=["ITL 35.2 ms"])  # type: ignore[arg-type]
    )
    assert (
        "- 280 W is more efficient and its p95 meets the target, but only within its own noise: "
        "ITL 35.2 ms." in better
    )


def test_a_target_met_without_a_word_on_its_margin_counts_as_a_margin() -> None:
    # analyses older than the bounds do not write ``margin``
    text = latency_section(CapLatencyTarget(max_ttft_ms=250.0, met=True, point=POINT, name="290 W"))
    assert "meets it with a margin" in text and "only within its own noise" not in text


def test_a_missed_target_names_the_closest_point_or_the_missing_columns() -> None:
    missed = CapLatencyTarget(
        max_itl_ms=5.0, met=False, point=POINT, name="200 W", misses=["ITL p95 31 ms > 5 ms"]
    )
    # the misses are escaped as markdown text (">" as "&gt;")
    assert latency_section(missed).endswith(
        "- **No measured point meets it.** Closest: 200 W (0.1114 TPS/W, 8.97 J/token, TTFT p95 "
        "212.3 ms, inter-token p95 31.04 ms): ITL p95 31 ms &gt; 5 ms.\n\n"
    )
    none = CapLatencyTarget(max_itl_ms=5.0, met=False, point=None)
    assert latency_section(none).endswith(
        "- **No point has the latency columns** (a run older than them).\n\n"
    )
