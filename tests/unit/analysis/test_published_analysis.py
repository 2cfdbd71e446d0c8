"""The analysis on every published curve that carries a draw (tests/data/published): the rules
of issue 44 hold on data nobody here wrote.

- The pick (sweet spot, a clock curve's peak) is the best TPS/W among the readings that stand:
  an outlier or implausible reading is named in the table and never picked.
- No point tied with the pick lies more than 5% below it (unless the source reads its whole curve
  as scatter: then the ties say the noise came from the curve).
- Readings the data show broken (``[curve.expect] outliers``) are named outliers.
- "No cap binds" only where TPS is flat.
- A pick at the edge of what was measured is named a boundary (or there is no answer).
- The source's own best, where it was measured and stands, is the pick or tied with it.
- A boost plateau or draw ceiling is flat in TPS, and a ceiling's caps draw under them.
"""

from __future__ import annotations

import math
import tomllib
from typing import Any

import pytest

from powersweep.analysis.load import load_curve
from powersweep.sweep.axes import AnalysisSettings, axis_of
from tests.paths import PUBLISHED

MANIFEST: list[dict[str, Any]] = tomllib.loads((PUBLISHED / "corpus.toml").read_text())["curve"]
WITH_DRAW = [c for c in MANIFEST if c["draw"] in ("measured", "derived")]
# A tie further below the pick than this is a false one (issue 44's held-out check).
TIE_LIMIT = 0.05
# A flat region's TPS stays within this of its median (a plateau is one operating point).
FLAT_LIMIT = 0.05


def _analysed(entry: dict[str, Any]) -> dict[str, Any]:
    curve = load_curve(PUBLISHED / entry["file"])
    result: dict[str, Any] = axis_of(curve).analyze(curve, AnalysisSettings()).to_json()
    return result


def _key(row: dict[str, Any]) -> Any:
    """A point's setting: its cap, or a clock point's locks."""
    if "sm_lock_mhz" in row or "mem_lock_mhz" in row:
        return (row.get("sm_lock_mhz"), row.get("mem_lock_mhz"))
    return row["cap_w"]


def _rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """Every point with its status and TPS/W (a clock curve's rows, a power curve's caps)."""
    rows = result["rows"] if result.get("kind") == "clocks" else result["caps"]
    return [r for r in rows if r.get("tps_per_w") is not None]


def _standing(result: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in _rows(result) if r.get("status") in (None, "ok")]


def _tied(result: dict[str, Any]) -> list[Any]:
    pick = result["sweet_spot"]
    if result.get("kind") == "clocks":
        return [_key(p) for p in pick.get("tied_points") or [pick]]
    return list(pick.get("tied_caps") or [pick["cap_w"]])


@pytest.fixture(scope="module", params=WITH_DRAW, ids=[c["id"] for c in WITH_DRAW])
def published(request: pytest.FixtureRequest) -> tuple[dict[str, Any], dict[str, Any]]:
    return request.param, _analysed(request.param)


def test_the_pick_is_the_best_reading_that_stands(published: tuple[dict, dict]) -> None:
    entry, result = published
    standing = _standing(result)
    best = max(standing, key=lambda r: r["tps_per_w"])
    assert _key(result["sweet_spot"]) == _key(best), entry["id"]
    set_aside = {_key(r) for r in _rows(result)} - {_key(r) for r in standing}
    assert _key(result["sweet_spot"]) not in set_aside
    assert not set(_tied(result)) & set_aside


def test_no_point_tied_with_the_pick_is_more_than_5_percent_below_it(
    published: tuple[dict, dict],
) -> None:
    entry, result = published
    by_key = {_key(r): r["tps_per_w"] for r in _standing(result)}
    best = by_key[_key(result["sweet_spot"])]
    far = {k: v / best - 1 for k, v in by_key.items() if k in _tied(result) and v < best * 0.95}
    if (entry.get("expect") or {}).get("scatter") == "wide":
        # a curve its source reads as scatter: wider ties are that scatter, measured, and said
        assert result["sweet_spot"]["noise_source"] == "the curve's scatter", entry["id"]
        return
    assert not far, f"{entry['id']}: tied beyond 5%: {far}"


def test_readings_the_data_show_broken_are_named_and_never_picked(
    published: tuple[dict, dict],
) -> None:
    entry, result = published
    expected = set((entry.get("expect") or {}).get("outliers") or [])
    named = {_key(r) for r in _rows(result) if r.get("status") == "outlier"}
    assert expected <= named, entry["id"]
    assert _key(result["sweet_spot"]) not in named


def test_no_cap_binds_only_where_tps_is_flat(published: tuple[dict, dict]) -> None:
    entry, result = published
    binds = result.get("power_cap_binds") or {}
    if result.get("kind") == "clocks" or binds.get("binds") is not False:
        return
    tps = [r["tps"] for r in _standing(result)]
    assert max(tps) / min(tps) - 1 <= FLAT_LIMIT, entry["id"]
    assert result["answer"]["kind"] == "none" and result["recommendation"] is None


def test_a_pick_at_the_edge_of_what_was_measured_is_a_boundary(
    published: tuple[dict, dict],
) -> None:
    entry, result = published
    if result.get("kind") == "clocks":
        peak = result["peak"]
        tier = [
            r["sm_lock_mhz"]
            for r in _standing(result)
            if r.get("mem_lock_mhz") == peak.get("mem_lock_mhz")
        ]
        edge = peak["sm_lock_mhz"] in (min(tier), max(tier))
    else:
        caps = [r["cap_w"] for r in _standing(result)]
        edge = result["sweet_spot"]["cap_w"] in (min(caps), max(caps))
    kind = result["answer"]["kind"]
    assert kind in (("boundary", "none") if edge else ("answer", "none")), entry["id"]


def test_the_sources_own_best_is_the_pick_or_tied_with_it(published: tuple[dict, dict]) -> None:
    entry, result = published
    reading = entry.get("reading") or {}
    named = reading.get("best_tps_per_w_at")
    if named is None:
        return
    key = (
        (float(named), reading.get("best_mem_lock_mhz"))
        if result.get("kind") == "clocks"
        else named
    )
    if key not in {_key(r) for r in _standing(result)}:
        return  # the source names a setting it did not measure (or one set aside)
    assert key in _tied(result) or key == _key(result["sweet_spot"]), entry["id"]


def test_a_region_is_flat_in_tps_and_a_ceiling_draws_under_its_caps(
    published: tuple[dict, dict],
) -> None:
    entry, result = published
    by_cap = {r["cap_w"]: r for r in _standing(result)} if result.get("kind") != "clocks" else {}
    n_gpus = result["run"].get("n_gpus") or 1
    for region in result.get("plateaus") or []:
        members = [by_cap[c] for c in region["caps_w"] if c in by_cap]
        tps = sorted(r["tps"] for r in members)
        median = tps[len(tps) // 2]
        assert all(abs(t / median - 1) <= FLAT_LIMIT for t in tps), (entry["id"], region)
        if region["kind"] == "draw_ceiling":
            assert all(r["power_w"] < r["cap_w"] * n_gpus for r in members), entry["id"]


def test_the_corpus_is_analysed_whole() -> None:
    # every curve with a draw reads and answers (or says why not), and each rule above ran on
    # at least 20 curves from 8 sources
    groups = {c["source_group"] for c in WITH_DRAW}
    assert len(WITH_DRAW) >= 20 and len(groups) >= 8
    for entry in WITH_DRAW:
        result = _analysed(entry)
        assert result["answer"]["kind"] in ("answer", "boundary", "none")
        assert all(math.isfinite(r["tps_per_w"]) for r in _standing(result))
