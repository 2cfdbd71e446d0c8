"""The typed analysis result: every analysis the tool writes reads back into its model and out
again unchanged, a key of the wrong type is one clear error, and readers see attributes."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest
from msgspec import UNSET

from powersweep.analysis import analyze, load_curve
from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint, LockRow
from powersweep.analysis.findings import Finding, Severity
from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.analysis.result_types import (
    FIGURE_KEYS,
    CapRow,
    JsonRecord,
    PointFigures,
    PointRecord,
    PowerAnalysis,
    _holds_points,
    known,
)
from powersweep.analysis.undervolt_result_types import OffsetStep
from powersweep.errors import UsageError
from tests.paths import SHARED_3090


def _power_csv(tmp_path: Path, with_latency: bool = True) -> Path:
    head = "cap_w,narr_tps,power_w,status,j_per_token,kwh_per_mtok,itl_p95_ms,ttft_p95_ms"
    lines = [head if with_latency else "cap_w,narr_tps,power_w,status"]
    for cap, tps, draw in ((200, 80.0, 199.0), (250, 108.0, 240.0), (300, 118.8, 270.0)):
        extra = f",{draw / tps},{draw / tps / 3.6},{1000 / tps},{cap}" if with_latency else ""
        lines.append(f"{cap},{tps},{draw},ok{extra}")
    lines.append("350,,,failed" + (",,,," if with_latency else ""))
    path = tmp_path / "caps.csv"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every document an analysis converted into its record: none, since an analysis builds
    its record where it computes it (no dict-to-record round trip)."""
    docs: list[dict[str, Any]] = []
    convert = JsonRecord.from_json.__func__  # type: ignore[attr-defined]

    def spy(cls: type[JsonRecord], data: Mapping[str, Any]) -> JsonRecord:
        docs.append(json.loads(json.dumps(data)))
        return convert(cls, data)  # type: ignore[no-any-return]

    for cls in (PowerAnalysis, ClockAnalysis):
        monkeypatch.setattr(cls, "from_json", classmethod(spy))
    return docs


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"objective": "cost", "eta": 0.3, "tariff_per_kwh": 0.3},
        {"objective": "near-peak", "max_itl_ms": 9.5, "max_ttft_ms": 260.0, "bootstrap": 0},
        {"max_itl_ms": 1.0},  # no point meets it: the closest is named
    ],
)
def test_a_power_analysis_round_trips_through_its_model(
    tmp_path: Path, options: dict, built: list[dict[str, Any]]
) -> None:
    doc = json.loads(json.dumps(analyze(load_curve(_power_csv(tmp_path)), **options).to_json()))
    assert built == []  # the record is built where the analysis computes it
    typed = PowerAnalysis.from_json(doc)
    assert typed.to_json() == doc
    assert typed.sweet_spot is not None and typed.sweet_spot.cap_w == 250.0
    assert [row.cap_w for row in typed.caps] == [200.0, 250.0, 300.0, 350.0]
    assert typed.caps[-1].figures.status == "failed" and typed.caps[-1].figures.tps is None
    assert all(isinstance(f, Finding) for f in typed.findings)


def test_keys_only_some_analyses_write_are_unset_and_stay_unwritten(tmp_path: Path) -> None:
    plain = analyze(load_curve(_power_csv(tmp_path, with_latency=False)))
    assert plain.recommendation is not None
    assert plain.recommendation.eta is UNSET and known(plain.recommendation.eta) is None
    assert "eta" not in plain.recommendation.to_json()
    cost = analyze(load_curve(_power_csv(tmp_path, with_latency=False)), objective="cost", eta=0.3)
    assert cost.recommendation is not None and known(cost.recommendation.eta) == 0.3


def test_the_measured_3090_curve_round_trips(built: list[dict[str, Any]]) -> None:
    if not SHARED_3090.is_file():
        pytest.skip(f"measured curve not found at {SHARED_3090}")
    doc = json.loads(json.dumps(analyze(load_curve(SHARED_3090)).to_json()))
    assert built == []
    assert PowerAnalysis.from_json(doc).to_json() == doc


def test_a_clock_analysis_round_trips_through_its_model(
    tmp_path: Path, built: list[dict[str, Any]]
) -> None:
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w,status"]
    for mem in (10001, 7001):
        for sm, tps, draw in ((1200, 30.0, 200.0), (1500, 36.0, 220.0), (1800, 38.0, 260.0)):
            lines.append(f"{sm},{mem},{tps * mem / 10001},{draw + mem / 1000},ok")
    lines.append("2100,10001,,,failed")
    path = tmp_path / "clocks.csv"
    path.write_text("\n".join(lines) + "\n")
    doc = json.loads(json.dumps(analyze_clocks(load_curve(path), max_itl_ms=50.0).to_json()))
    assert built == []
    typed = ClockAnalysis.from_json(doc)
    assert typed.to_json() == doc
    assert typed.axis == "grid" and typed.peak is not None
    assert (typed.peak.sm_lock_mhz, typed.peak.mem_lock_mhz) == (1500.0, 10001.0)
    assert {t.mem_lock_mhz for t in typed.tiers} == {10001.0, 7001.0}
    assert typed.rows[-1].figures.status == "failed"


def test_a_wrong_type_is_one_error_naming_the_key() -> None:
    with pytest.raises(UsageError, match=r"does not follow its schema: .*\$\.sweet_spot\.cap_w"):
        PowerAnalysis.from_json({"schema_version": 1, "sweet_spot": {"cap_w": "high"}})


def test_an_unknown_severity_reads_as_info_as_the_finding_type_says() -> None:
    doc = {"findings": [{"severity": "shout", "code": "x", "message": "m", "hint": None}]}
    assert PowerAnalysis.from_json(doc).findings[0].severity is Severity.INFO


POINT_RECORDS = [CapRow, LockPoint, LockRow, OffsetStep]


@pytest.mark.parametrize("record", POINT_RECORDS)
def test_a_measured_points_figures_are_declared_once(record: type[PointRecord]) -> None:
    own = {f.name for f in fields(record)}  # type: ignore[arg-type]
    assert issubclass(record, PointRecord) and "figures" in own
    assert own & FIGURE_KEYS == set()  # every figure lives in PointFigures alone
    assert set(record.KEYS) <= own | FIGURE_KEYS and len(set(record.KEYS)) == len(record.KEYS)


def test_a_points_figures_are_written_flat_in_its_keys_order_and_read_back_nested() -> None:
    doc = {"cap_w": 250.0, "tps": 30.0, "power_w": 240.0, "status": "ok", "n_gpus": 1.0}
    doc |= {"n_measurements": 2, "tps_u95_pct": 1.5, "regime": "power_limited"}
    row = CapRow.from_json(doc)
    assert row.figures == PointFigures(
        tps=30.0, power_w=240.0, status="ok", n_measurements=2, tps_u95_pct=1.5
    )
    assert row.n_gpus == 1.0 and row.regime == "power_limited"
    assert row.to_json() == doc and list(row.to_json()) == list(doc)
    step = OffsetStep(sm_offset_mhz=90.0, figures=PointFigures(tps=30.0, status="ok"))
    head = ["sm_offset_mhz", "sm_lock_mhz", "cap_w", "reason", "status", "error", "tps"]
    assert list(step.to_json())[:7] == head
    assert "code_tps" not in step.to_json()  # a figure the undervolt step does not write


def test_a_keys_name_that_is_no_field_is_refused_when_the_record_is_declared() -> None:
    with pytest.raises(TypeError, match="names no field"):

        class Broken(PointRecord):
            KEYS = ("cap_w", "watts")
            cap_w: float


def test_a_clock_analysis_holds_its_peak_once_and_writes_it_under_both_names() -> None:
    peak = {"sm_lock_mhz": 1500.0, "mem_lock_mhz": None, "tps": 36.0, "tps_per_w": 0.16}
    typed = ClockAnalysis.from_json({"kind": "clocks", "peak": peak, "sweet_spot": peak})
    assert typed.sweet_spot is typed.peak
    written = typed.to_json()
    assert written["peak"] == written["sweet_spot"] == peak
    keys = list(written)
    assert keys[keys.index("peak") + 1] == "sweet_spot"
    # a document naming it only as sweet_spot reads it as the peak
    only = ClockAnalysis.from_json({"kind": "clocks", "sweet_spot": peak})
    assert only.peak is not None and only.peak.to_json() == peak


def test_reading_walks_only_the_records_that_can_hold_a_point() -> None:
    # a fleet report's thousands of outliers hold no point record: reading one walked them all,
    # value by value, ten times slower (issue 48's merge); an analysis's rows and picks are walked
    assert _holds_points(PowerAnalysis) and _holds_points(list[CapRow] | None)
    assert not _holds_points(FleetReport) and not _holds_points(dict[str, float])
