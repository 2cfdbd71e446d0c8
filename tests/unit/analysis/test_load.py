"""powersweep.analysis.load: caps.csv read into its typed table (status, text columns, source
lines, rows without a cap noted, a clock curve keyed by its locks), run.json's checks, the metric
picked, and caps.csv written back.

(test_core.py covers load_curve's one-line errors on broken files and paths.)"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from powersweep.analysis.load import (
    SOURCE_LINE,
    load_curve,
    pick_metric,
    read_caps,
    read_run_json,
    write_caps_csv,
)
from powersweep.analysis.run_record import RunRecord
from powersweep.errors import PowersweepError, UsageError
from tests.helpers.files import write_text as _csv


def test_rows_are_typed_sorted_and_keep_their_source_lines(tmp_path: Path) -> None:
    path = _csv(
        tmp_path,
        "cap_w,narr_tps,power_w,status,error,reason\n"
        "300,30,299, OK ,,\n"
        "200,20,199,Failed, 3 of 4 requests failed ,confirm\n"
        "250,25,249,,,\n",
    )
    notes: list[str] = []
    caps, metric = read_caps(path, notes)
    assert metric == "narr_tps"
    assert caps["cap_w"].to_list() == [200.0, 250.0, 300.0]
    assert caps[SOURCE_LINE].to_list() == [3, 4, 2]
    assert caps["status"].to_list() == ["failed", "ok", "ok"]
    assert caps["error"].to_list() == ["3 of 4 requests failed", None, None]
    assert caps["reason"].to_list() == ["confirm", None, None]
    assert caps["n_gpus"].to_list() == [1.0, 1.0, 1.0]  # absent: one card
    assert caps["prefill_tps"].dtype == pl.Float64 and caps["prefill_tps"].null_count() == 3
    assert caps["tps_blocks"].dtype == pl.String
    assert notes == []


def test_a_serving_runs_own_columns_are_read_and_no_other_run_grows_them(tmp_path: Path) -> None:
    # the serving load's columns are the run format's: a serving run read with a note that 23
    # of its columns were ignored, and without its energy per request
    serving = _csv(
        tmp_path,
        "cap_w,narr_tps,power_w,j_per_request,saturated,ttft_p99_ms\n300,30,299,1250,0,5980\n",
    )
    notes: list[str] = []
    caps, _ = read_caps(serving, notes)
    assert notes == []
    assert caps["j_per_request"].to_list() == [1250.0]
    assert caps["saturated"].dtype == pl.Float64
    plain, _ = read_caps(_csv(tmp_path, "cap_w,narr_tps,power_w\n300,30,299\n", "p.csv"), notes)
    assert "j_per_request" not in plain.columns and notes == []


def test_rows_without_a_finite_cap_are_dropped_with_a_note_blank_lines_silently(
    tmp_path: Path,
) -> None:
    path = _csv(tmp_path, "cap_w,narr_tps,power_w\n300,30,299\n,,\n,31,300\ninf,32,301\n")
    notes: list[str] = []
    caps, _ = read_caps(path, notes)
    assert caps["cap_w"].to_list() == [300.0]
    assert notes == ["caps.csv: 2 row(s) without a finite cap_w ignored (line 4, 5)"]


def test_a_clock_curve_needs_no_cap_and_keeps_its_order(tmp_path: Path) -> None:
    path = _csv(tmp_path, "sm_lock_mhz,narr_tps,power_w\n1800,30,250\n1200,20,180\n")
    caps, metric = read_caps(path)
    assert metric == "narr_tps"
    assert caps["sm_lock_mhz"].to_list() == [1800.0, 1200.0]  # not sorted by a cap
    assert caps["cap_w"].null_count() == 2


def test_a_prefill_curve_picks_prefill_and_nothing_usable_is_named(tmp_path: Path) -> None:
    _, metric = read_caps(_csv(tmp_path, "cap_w,narr_tps,prefill_tps,power_w\n300,,3000,299\n"))
    assert metric == "prefill_tps"
    path = _csv(tmp_path, "cap_w,narr_tps,power_w\n300,0,299\n310,-1,309\n")
    with pytest.raises(UsageError) as exc:
        read_caps(path)
    assert str(exc.value) == (
        f"{path}: nothing to analyse: no row has a numeric cap_w, a positive finite power_w and "
        "a positive finite narr_tps or prefill_tps (2 row(s); line 2: power_w 299, narr_tps 0)"
    )


def test_pick_metric_prefers_decode_and_needs_a_positive_draw() -> None:
    df = pl.DataFrame(
        {"narr_tps": [30.0, None], "prefill_tps": [None, 3000.0], "power_w": [0.0, 299.0]}
    )
    assert pick_metric(df) == "prefill_tps"  # decode's only row has no draw
    assert pick_metric(df.with_columns(pl.lit(299.0).alias("power_w"))) == "narr_tps"
    assert pick_metric(df.with_columns(pl.lit(None, pl.Float64).alias("power_w"))) is None


def test_read_run_json_checks_its_shape_and_version(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"status": "complete"}))
    assert read_run_json(path) == RunRecord(status="complete")
    for doc, error in (
        ([1, 2], "expected a JSON object"),
        ({"schema_version": "1"}, "schema_version must be an integer, got '1'"),
        ({"schema_version": True}, "schema_version must be an integer, got True"),
        ({"schema_version": 99}, "written by a newer powersweep (schema_version 99 > 1)"),
        ({"status": 3}, "run.json does not follow its schema: Expected `str | null`"),
    ):
        path.write_text(json.dumps(doc))
        with pytest.raises(UsageError) as exc:
            read_run_json(path)
        assert str(exc.value).startswith(f"{path}: {error}")
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(UsageError, match="cannot read"):
        read_run_json(path)


def test_a_caps_csv_in_a_run_directory_brings_its_run_json(tmp_path: Path) -> None:
    path = _csv(tmp_path, "cap_w,narr_tps,power_w\n300,30,299\n")
    (tmp_path / "run.json").write_text(json.dumps({"status": "complete"}))
    assert load_curve(path).run == RunRecord(status="complete")
    # another name is a bare file: its folder's run.json is not its own
    other = _csv(tmp_path, "cap_w,narr_tps,power_w\n300,30,299\n", name="mine.csv")
    curve = load_curve(other)
    assert curve.run is None and curve.requests is None and curve.source == other


def test_write_caps_csv_round_trips_and_refuses_a_table_without_caps(tmp_path: Path) -> None:
    df = pl.DataFrame({"cap_w": [300.0, 250.0], "narr_tps": [30.123456789, None]})
    out = tmp_path / "deep" / "er" / "caps.csv"
    write_caps_csv(df, out)
    assert out.read_text() == "cap_w,narr_tps\n300.0,30.123456789\n250.0,\n"
    with pytest.raises(PowersweepError, match="the table has no cap_w column"):
        write_caps_csv(pl.DataFrame({"narr_tps": [1.0]}), tmp_path / "x.csv")
    (tmp_path / "file").write_text("")
    with pytest.raises(PowersweepError, match="cannot write"):
        write_caps_csv(df, tmp_path / "file" / "caps.csv")
