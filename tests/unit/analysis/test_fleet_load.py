"""powersweep.analysis.fleet_load: many runs' caps.csv and run.json loaded at once, in the order
given, each run's rows typed, marked and its metric picked as load_curve does; a run the fast scan
cannot take is read alone, so its error names the file, line and column."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from powersweep.analysis.core import analyze
from powersweep.analysis.fleet_load import load_curves
from powersweep.analysis.load import load_curve
from powersweep.analysis.plausibility import IMPLAUSIBLE
from powersweep.analysis.run_record import RunRecord

PLAIN = "cap_w,narr_tps,power_w,status\n300,30,299,\n200,20,199,ok\n250,25,249,FAILED\n"


def _run(root: Path, name: str, caps: str | bytes, run: dict | None = None) -> Path:
    d = root / name
    d.mkdir()
    if isinstance(caps, bytes):
        (d / "caps.csv").write_bytes(caps)
    else:
        (d / "caps.csv").write_text(caps)
    if run is not None:
        (d / "run.json").write_text(json.dumps(run))
    return d


def test_runs_sharing_a_header_load_in_order_as_load_curve_reads_them(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", PLAIN, {"status": "complete", "host": "a"})
    b = _run(tmp_path, "b", PLAIN.replace("300,30,", "300,31,"))
    prefill = _run(tmp_path, "c", "cap_w,prefill_tps,power_w\n300,3000,299\n")
    curves, failed = load_curves([b, a, prefill])
    assert failed == []
    assert [c.source for c in curves] == [b, a, prefill]
    assert [c.metric for c in curves] == ["narr_tps", "narr_tps", "prefill_tps"]
    first = curves[1]
    assert first.run == RunRecord(status="complete", host="a") and curves[0].run is None
    assert first.samples is None and first.requests is None and first.out_dir == a
    one = load_curve(a)
    for col in ("cap_w", "narr_tps", "power_w", "status", "n_gpus"):
        assert first.caps[col].to_list() == one.caps[col].to_list(), col
    assert first.caps["status"].to_list() == ["ok", "failed", "ok"]
    assert curves[0].caps["narr_tps"].to_list() == [20.0, 25.0, 31.0]


def test_implausible_rows_are_marked_by_physics_in_each_run(tmp_path: Path) -> None:
    slow_card = "cap_w,narr_tps,power_w\n200,2,199\n250,2.5,249\n300,3,299\n"
    fast_card = "cap_w,narr_tps,power_w\n200,20,199\n250,25,249\n300,30,299\n350,35,9000\n"
    curves, _ = load_curves([_run(tmp_path, "slow", slow_card), _run(tmp_path, "fast", fast_card)])
    assert curves[0].caps["status"].to_list() == ["ok", "ok", "ok"]  # 10x slower is no outlier
    assert curves[1].caps["status"].to_list() == ["ok", "ok", "ok", IMPLAUSIBLE]
    assert curves[1].caps["error"][3] == (
        "draw 9000.0 W per card is implausible (under 1 W or over 5 kW)"
    )


def test_a_run_the_scan_cannot_take_is_read_alone_and_named(tmp_path: Path) -> None:
    good = _run(tmp_path, "good", PLAIN)
    bad_cell = _run(tmp_path, "bad", "cap_w,narr_tps,power_w\n300,30,299\n310,fast,309\n")
    unended = _run(tmp_path, "unended", "cap_w,narr_tps,power_w\n300,30,299")
    semicolon = _run(tmp_path, "semi", "cap_w;narr_tps;power_w\n300;30;299\n")
    no_caps = tmp_path / "empty"
    no_caps.mkdir()
    negative = _run(tmp_path, "neg", "cap_w,narr_tps,power_w\n-5,30,299\n")
    newer = _run(tmp_path, "newer", PLAIN, {"schema_version": 99})
    nothing = _run(tmp_path, "nothing", "cap_w,narr_tps,power_w\n300,0,299\n")
    curves, failed = load_curves(
        [good, bad_cell, unended, semicolon, no_caps, negative, newer, nothing]
    )
    assert [c.source for c in curves] == [good, unended, semicolon]
    assert [c.caps["cap_w"].to_list() for c in curves[1:]] == [[300.0], [300.0]]
    errors = dict(failed)
    assert list(errors) == [bad_cell, no_caps, negative, newer, nothing]
    assert errors[bad_cell] == f"{bad_cell / 'caps.csv'} line 3: narr_tps 'fast' is not a number"
    assert errors[no_caps] == f"{no_caps}: no caps.csv here"
    assert errors[negative] == f"{negative / 'caps.csv'}: cap_w must be positive watts"
    assert errors[newer].startswith(f"{newer / 'run.json'}: written by a newer powersweep")
    assert errors[nothing].startswith(f"{nothing / 'caps.csv'}: nothing to analyse")


def test_headers_in_another_order_or_with_spaces_are_scanned_alike(tmp_path: Path) -> None:
    a = _run(tmp_path, "a", "power_w,cap_w,narr_tps\n299,300,30\n")
    b = _run(tmp_path, "b", " cap_w , narr_tps , power_w \n300,31,299\n")
    c = _run(tmp_path, "c", "cap_w,narr_tps,power_w,fan\n300,32,299,n/a\n")
    curves, failed = load_curves([a, b, c])
    assert failed == []
    assert [c.caps.select("cap_w", "narr_tps", "power_w").row(0) for c in curves] == [
        (300.0, 30.0, 299.0),
        (300.0, 31.0, 299.0),
        (300.0, 32.0, 299.0),
    ]
    assert all(c.caps["status"].to_list() == ["ok"] for c in curves)
    assert curves[0].caps.schema["narr_tps"] == pl.Float64


def test_nothing_to_load_gives_nothing(tmp_path: Path) -> None:
    assert load_curves([]) == ([], [])


def test_a_re_measured_cap_is_analysed_as_load_curve_reads_it(tmp_path: Path) -> None:
    run = _run(
        tmp_path,
        "r",
        "cap_w,narr_tps,power_w,status,reason\n"
        "200,20,199,ok,\n250,30,240,ok,\n250,24,240,ok,\n300,27,299,ok,\n",
    )
    (fast,), _ = load_curves([run])
    alone = analyze(load_curve(run), bootstrap=0).to_json()
    scanned = analyze(fast, bootstrap=0).to_json()
    assert alone["sweet_spot"]["cap_w"] == 200.0  # 250 W's last reading (24 TPS) counts
    assert scanned["sweet_spot"]["cap_w"] == alone["sweet_spot"]["cap_w"]
    assert [r["tps"] for r in scanned["caps"]] == [r["tps"] for r in alone["caps"]]
