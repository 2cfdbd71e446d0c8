"""``--load-mode serving`` end to end on the simulated rig: the sweep completes, caps.csv has the
serving columns, every cap replays the same arrival sequence, ``analyze`` answers in TPS/W of
output tokens, and the other modes' caps.csv has none of the columns."""

from __future__ import annotations

import csv
import math
from pathlib import Path

from powersweep.runformat import CAPS_COLUMNS, SERVING_COLUMNS
from tests.integration.conftest import powersweep, read_json, sweep_run_dir


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_a_serving_sweep_writes_its_figures_and_replays_one_sequence(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path,
        "--simulate",
        "rtx3090-air",
        "--cooling",
        "air",
        "--load-mode",
        "serving",
        "--request-rate",
        "2",
        "--max-ttft-ms",
        "2000",
        "--caps",
        "250,330",
        "--no-confirm",
        "--seed",
        "3",
        "--quiet",
        "--no-charts",
    )
    with open(run / "caps.csv", newline="") as f:
        header = next(csv.reader(f))
    assert tuple(header) == CAPS_COLUMNS + SERVING_COLUMNS
    caps = _rows(run / "caps.csv")
    assert {float(r["cap_w"]) for r in caps} == {250.0, 330.0}
    for row in caps:
        assert row["status"] == "ok", row["error"]
        assert float(row["request_rate_rps"]) == 2.0
        assert int(float(row["n_offered"])) > 0
        assert float(row["narr_tps"]) > 0 and float(row["j_per_request"]) > 0
        for column in ("ttft_p50_ms", "ttft_p99_ms", "e2e_p95_ms", "over_ttft_pct", "goodput_rps"):
            assert math.isfinite(float(row[column])), column
        assert row["saturated"] in ("0.0", "1.0")
    # the same arrivals at both caps: indices, offsets from the point's first, answer lengths
    # (a point read again at the run's end, confirm true, replays it once more)
    requests = [
        r
        for r in _rows(run / "requests.csv")
        if r["prompt_kind"] in ("serve", "serve-lead") and r["confirm"] == "false"
    ]
    again = [
        (r["stream"], r["max_tokens"])
        for r in _rows(run / "requests.csv")
        if r["prompt_kind"] in ("serve", "serve-lead") and r["confirm"] == "true"
    ]
    by_cap: dict[str, list[tuple[str, str, str]]] = {}
    firsts: dict[str, float] = {}
    for r in requests:
        firsts.setdefault(r["cap_w"], float(r["t_start_s"]))
    for r in requests:
        offset = f"{float(r['t_start_s']) - firsts[r['cap_w']]:.6f}"
        by_cap.setdefault(r["cap_w"], []).append((r["stream"], offset, r["max_tokens"]))
    sequences = list(by_cap.values())
    assert len(sequences) == 2 and sequences[0] and sequences[0] == sequences[1]
    assert again == [(i, n) for i, _, n in sequences[0]][: len(again)]
    options = read_json(run / "run.json")["options"]
    assert options["request_rate_rps"] == 2.0 and options["arrivals"] == "poisson"
    analysis = read_json(run / "analysis.json")
    assert isinstance(analysis, dict)  # read_json checked it against its typed record
    done = powersweep("analyze", str(run), timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr


def test_the_other_modes_caps_csv_has_no_serving_column(tmp_path: Path) -> None:
    run = sweep_run_dir(
        tmp_path,
        "--simulate",
        "rtx3090-air",
        "--caps",
        "300",
        "--no-confirm",
        "--quiet",
        "--no-charts",
    )
    with open(run / "caps.csv", newline="") as f:
        assert tuple(next(csv.reader(f))) == CAPS_COLUMNS
    assert "request_rate_rps" not in read_json(run / "run.json")["options"]
