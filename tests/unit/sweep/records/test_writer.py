"""The run directory (``sweep/records/writer.py``): requests.csv rows (warnings, the server's
rates), a resumed older run keeping its columns, rows counted in run.json, the folder's name, CSV
cells, run.json replaced atomically, and samples and caps rows."""

from __future__ import annotations

import csv
import json
import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from powersweep.errors import PowersweepError
from powersweep.runformat import REQUESTS_COLUMNS
from powersweep.sweep.gpu import GpuSample
from powersweep.sweep.records.writer import RunWriter, cell, run_dir_name, write_json_atomic
from powersweep.sweep.sampling.sampler import SampleRow
from powersweep.sweep.server.client import RequestResult
from tests.helpers.files import read_csv


def _request_result(**kw: object) -> RequestResult:
    base: dict[str, object] = {
        "prompt_kind": "narr",
        "stream": 0,
        "t_start_s": 1.0,
        "t_first_token_s": 1.5,
        "t_last_token_s": 11.5,
        "t_end_s": 11.6,
        "prompt_tokens": 50,
        "completion_tokens": 501,
        "token_source": "usage",
        "chunk_tokens": 126,
        "token_times_s": None,
        "finish_reason": "length",
        "ok": True,
        "error": "",
    }
    return RequestResult(**{**base, **kw})  # type: ignore[arg-type]


def test_warnings_and_server_rates_are_written(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    writer.append_requests(
        300.0,
        [
            _request_result(
                warnings=("packed_chunks", "ignored_max_tokens"),
                server_decode_tps=50.25,
                server_prompt_tps=900.0,
            ),
            _request_result(server_decode_tps=math.nan),
        ],
    )
    first, second = read_csv(writer.path / "requests.csv")
    assert first["warnings"] == "packed_chunks;ignored_max_tokens"
    assert (first["server_decode_tps"], first["server_prompt_tps"]) == ("50.25", "900.0")
    assert first["decode_tps"] == "50.0"
    assert second["warnings"] == second["server_decode_tps"] == second["server_prompt_tps"] == ""


def test_an_undervolt_steps_offset_labels_its_readings_and_requests(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    sample = GpuSample(0, 280.0, 1.0, 60.0, 1380.0, 9751.0, 99.0, 2, 0)
    writer.append_samples([SampleRow(0.0, 0, 300.0, "narr", sample, 1380.0, None, 60.0)])
    writer.append_requests(300.0, [_request_result()], (1380.0, None), offset_mhz=60.0)
    writer.append_requests(300.0, [_request_result()])
    (reading,) = read_csv(writer.path / "samples.csv")
    assert (reading["sm_lock_mhz"], reading["sm_offset_mhz"]) == ("1380.0", "60.0")
    step, plain = read_csv(writer.path / "requests.csv")
    assert step["sm_offset_mhz"] == "60.0" and plain["sm_offset_mhz"] == ""


def test_a_resumed_older_run_keeps_its_requests_columns(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    old = [c for c in REQUESTS_COLUMNS if "server" not in c and c != "warnings"]
    (writer.path / "requests.csv").write_text(",".join(old) + "\n")
    RunWriter.reopen(writer.path).append_requests(300.0, [_request_result(warnings=("no_usage",))])
    lines = (writer.path / "requests.csv").read_text().splitlines()
    assert len(lines[1].split(",")) == len(old)
    (row,) = read_csv(writer.path / "requests.csv")
    assert row["cap_w"] == "300.0" and row["error"] == "" and row["ok"] == "true"


def test_run_json_counts_the_rows_written_whole(tmp_path: Path) -> None:
    import json

    from powersweep.analysis import load_curve

    writer = RunWriter(tmp_path, ["GPU"], "decode-single", initial_meta={"status": "running"})
    for cap in (300.0, 280.0):
        writer.append_cap({"cap_w": cap, "narr_tps": cap / 10, "power_w": cap - 1})
        writer.append_requests(cap, [_request_result()])
        writer.write_run_json({"status": "running", "caps_done": [300.0, 280.0][: 1 + (cap < 300)]})
    meta = json.loads((writer.path / "run.json").read_text())
    assert meta["rows_written"] == {"caps.csv": 2, "requests.csv": 2, "samples.csv": 0}
    # a row that lost only its line end (counted) is kept by the reader and the resume alike
    caps = writer.path / "caps.csv"
    caps.write_bytes(caps.read_bytes().rstrip(b"\r\n"))
    assert load_curve(writer.path).caps.height == 2
    again = RunWriter.reopen(writer.path)
    assert again.dropped_partial == [] and caps.read_bytes().endswith(b"\r\n")
    assert again.rows_written()["caps.csv"] == 2
    # a row written after the last run.json and cut: both drop it
    with open(caps, "a") as f:
        f.write("260,26,2")
    assert load_curve(writer.path).caps.height == 2
    assert RunWriter.reopen(writer.path).dropped_partial == ["caps.csv"]
    assert caps.read_bytes().endswith(b"\r\n")


def test_a_run_folder_names_every_card_model() -> None:
    from powersweep.sweep.records.writer import gpu_slug

    assert gpu_slug(["NVIDIA GeForce RTX 3090"]) == "rtx-3090"
    assert gpu_slug(["NVIDIA GeForce RTX 4090"] * 2) == "2x-rtx-4090"
    mixed = ["NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090"]
    assert gpu_slug(mixed) == "2x-rtx-3090+rtx-4090"
    assert gpu_slug(["NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"]) == (
        "h100-80gb-hbm3+a100-sxm4-80gb"
    )
    assert gpu_slug([]) == "gpu"


# --- cells, run.json, the run directory, samples and caps rows ------------------------------


def test_cells_are_empty_for_missing_values_and_words_for_booleans() -> None:
    assert [cell(None), cell(math.nan), cell(math.inf), cell(True), cell(False)] == [
        "",
        "",
        "",
        "true",
        "false",
    ]
    assert (cell(1 / 3), cell(250.0), cell(7), cell("narr")) == ("0.333333", "250.0", "7", "narr")


def test_run_json_is_strict_json_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_json_atomic(path, {"a": math.nan, "b": [1.0, math.inf, (2, math.nan)], 3: {"c": 1}})
    assert json.loads(path.read_text()) == {"a": None, "b": [1.0, None, [2, None]], "3": {"c": 1}}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]  # no temporary file left
    with pytest.raises(PowersweepError, match=f"^cannot write {tmp_path / 'missing'}"):
        write_json_atomic(tmp_path / "missing" / "run.json", {})


def test_a_run_directory_never_merges_into_another(tmp_path: Path) -> None:
    now = datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)
    first = RunWriter(tmp_path, ["NVIDIA GeForce RTX 3090"], "decode-single", now)
    second = RunWriter(tmp_path, ["NVIDIA GeForce RTX 3090"], "decode-single", now)
    assert first.path.name == "20260501-100000-rtx-3090-power-decode-single"
    assert second.path.name == first.path.name + "-2"
    assert sorted(p.name for p in second.path.iterdir()) == [
        "caps.csv",
        "requests.csv",
        "samples.csv",
    ]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".run-")]


def test_a_run_directory_name_says_axis_cooling_and_load(tmp_path: Path) -> None:
    now = datetime(2026, 5, 1, 10, 0, 0, tzinfo=UTC)
    names = ["NVIDIA GeForce RTX 3090"]
    clock = RunWriter(tmp_path, names, "decode-single", now, axis="sm-clock", cooling="water")
    volt = RunWriter(tmp_path, names, "prefill-heavy", now, axis="undervolt", cooling="air")
    power = RunWriter(tmp_path, names * 2, "decode-concurrent", now, cooling="aio")
    assert clock.path.name == "20260501-100000-rtx-3090-sm-clock-water-decode-single"
    assert volt.path.name == "20260501-100000-rtx-3090-undervolt-air-prefill-heavy"
    assert power.path.name == "20260501-100000-2x-rtx-3090-power-aio-decode-concurrent"
    # an unspecified cooling names nothing (it would tell runs apart by a word that says nothing)
    assert run_dir_name("s", names, "decode-single", "grid", "unspecified") == (
        "s-rtx-3090-grid-decode-single"
    )


def test_an_out_directory_that_cannot_be_made_is_one_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PowersweepError, match=r"cannot create the run directory under .*--out\)$"):
        RunWriter(blocker / "runs", ["GPU"], "decode-single")


def test_a_resumed_run_gets_the_csvs_it_lacks(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    (writer.path / "samples.csv").unlink()
    (writer.path / "caps.csv").write_text("")
    again = RunWriter.reopen(writer.path)
    assert (writer.path / "samples.csv").read_text().startswith("t_s,")
    assert (writer.path / "caps.csv").read_text().startswith("cap_w,")
    assert again.rows_written() == {"caps.csv": 0, "requests.csv": 0, "samples.csv": 0}


def test_samples_and_caps_rows_follow_their_columns(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    sample = GpuSample(1, 250.5, math.nan, 61.0, 1410.0, 9501.0, 97.0, 2, 0x4, 0, 252.25)
    writer.append_samples([SampleRow(12.34567, 3, 300.0, "narr", sample, 1410.0)], confirm=True)
    (row,) = read_csv(writer.path / "samples.csv")
    assert (row["t_s"], row["tick"], row["phase"], row["gpu_index"]) == ("12.346", "3", "narr", "1")
    assert (row["energy_mj"], row["pstate"], row["sm_lock_mhz"], row["mem_lock_mhz"]) == (
        "",
        "2",
        "1410.0",
        "",
    )
    assert (row["throttle_power"], row["throttle_thermal"], row["confirm"]) == (
        "true",
        "false",
        "true",
    )
    assert row["power_instant_w"] == "252.25"
    writer.append_cap({"cap_w": 300.0, "status": "failed", "error": "HTTP 500:\n  boom  again"})
    (cap,) = read_csv(writer.path / "caps.csv")
    assert (cap["cap_w"], cap["status"], cap["error"]) == (
        "300.0",
        "failed",
        "HTTP 500: boom again",
    )
    assert cap["narr_tps"] == ""


def test_caps_are_restated_in_place_row_for_row(tmp_path: Path) -> None:
    # the run-to-run term, known at the end of the run, carried into every row already written
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    writer.append_cap({"cap_w": 300.0, "status": "ok", "error": "a, b", "tps_u95_pct": 0.5})
    writer.append_cap({"cap_w": 290.0, "status": "failed", "error": "boom"})
    before = writer.rows_written()
    writer.restate_caps(
        lambda row: {"tps_u95_pct": 1.25, "not_a_column": 1.0} if row["status"] == "ok" else {}
    )
    with open(writer.path / "caps.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["cap_w"], r["tps_u95_pct"], r["error"]) for r in rows] == [
        ("300.0", "1.25", "a, b"),
        ("290.0", "", "boom"),
    ]
    assert "not_a_column" not in rows[0]
    assert writer.rows_written() == before
    assert not list(writer.path.glob(".caps.csv*"))  # nothing left beside it


def test_text_cells_run_no_spreadsheet_formula_and_numbers_stay() -> None:
    from powersweep.sweep.records.writer import cell

    # issue 46: a server's error or finish_reason is the server's words (OWASP's rule)
    assert cell("=cmd|' /C calc'!A0") == "'=cmd|' /C calc'!A0"
    assert cell("@SUM(1)") == "'@SUM(1)" and cell("+x") == "'+x" and cell("-x") == "'-x"
    assert cell(-5) == "-5" and cell(-5.25) == "-5.25" and cell("-5") == "-5"
    assert cell("HTTP 500") == "HTTP 500" and cell(True) == "true"
