"""requests.csv rows: warnings and the server's rates, and a resumed older run keeps its columns."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from powersweep.runformat import REQUESTS_COLUMNS
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.server.client import RequestResult


def _result(**kw: object) -> RequestResult:
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


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_warnings_and_server_rates_are_written(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    writer.append_requests(
        300.0,
        [
            _result(
                warnings=("packed_chunks", "ignored_max_tokens"),
                server_decode_tps=50.25,
                server_prompt_tps=900.0,
            ),
            _result(server_decode_tps=math.nan),
        ],
    )
    first, second = _rows(writer.path / "requests.csv")
    assert first["warnings"] == "packed_chunks;ignored_max_tokens"
    assert (first["server_decode_tps"], first["server_prompt_tps"]) == ("50.25", "900.0")
    assert first["decode_tps"] == "50.0"
    assert second["warnings"] == second["server_decode_tps"] == second["server_prompt_tps"] == ""


def test_a_resumed_older_run_keeps_its_requests_columns(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path, ["GPU"], "decode-single")
    old = [c for c in REQUESTS_COLUMNS if "server" not in c and c != "warnings"]
    (writer.path / "requests.csv").write_text(",".join(old) + "\n")
    RunWriter.reopen(writer.path).append_requests(300.0, [_result(warnings=("no_usage",))])
    lines = (writer.path / "requests.csv").read_text().splitlines()
    assert len(lines[1].split(",")) == len(old)
    (row,) = _rows(writer.path / "requests.csv")
    assert row["cap_w"] == "300.0" and row["error"] == "" and row["ok"] == "true"


def test_run_json_counts_the_rows_written_whole(tmp_path: Path) -> None:
    import json

    from powersweep.analysis import load_curve

    writer = RunWriter(tmp_path, ["GPU"], "decode-single", initial_meta={"status": "running"})
    for cap in (300.0, 280.0):
        writer.append_cap({"cap_w": cap, "narr_tps": cap / 10, "power_w": cap - 1})
        writer.append_requests(cap, [_result()])
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
