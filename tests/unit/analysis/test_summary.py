"""summary.md, import of pasted tables, caps.csv writing and cross-mode."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from powersweep.analysis import (
    analyze,
    cross_mode,
    escape_md,
    import_summary,
    load_curve,
    render_summary,
    write_caps_csv,
)
from powersweep.errors import UsageError

PASTED = """Here is my 3090 sweep:

| Cap (W/card) | Narr TPS | Code TPS | Prefill TPS | Power (W) | TPS/combined W |
|---|---|---|---|---|---|
| 250 | 25.17 | 25.07 | ? | 249.80 W | 0.101 |
| 290W | 32.26 | 32.17 | - | 289.55 | 0.111 |
| 330 | 34.57 | ? |  | 329.42 | 0.105 |
| 370 | ? | 34.67 | 1,234.5 | 334.00 | ? |
"""


def test_import_pasted_table(tmp_path: Path) -> None:
    md = tmp_path / "summary.md"
    md.write_text(PASTED)
    df = import_summary(md)
    assert df.columns == ["cap_w", "narr_tps", "code_tps", "prefill_tps", "power_w", "tps_per_w"]
    assert df["cap_w"].to_list() == [250.0, 290.0, 330.0, 370.0]
    assert df["power_w"].to_list() == [249.8, 289.55, 329.42, 334.0]
    assert df["narr_tps"].to_list() == [25.17, 32.26, 34.57, None]
    assert df["code_tps"].to_list() == [25.07, 32.17, None, 34.67]
    assert df["prefill_tps"].to_list() == [None, None, None, 1234.5]
    assert df["tps_per_w"].to_list() == [0.101, 0.111, 0.105, None]

    # Round trip: the imported table is a caps.csv the analysis reads.
    out = tmp_path / "imported" / "caps.csv"
    write_caps_csv(df, out)
    result = analyze(load_curve(out)).to_json()
    assert result["sweet_spot"]["cap_w"] == 290.0


def test_import_tolerates_varied_headers_and_quotes(tmp_path: Path) -> None:
    md = tmp_path / "s.md"
    md.write_text(
        "> | Power limit | Decode tok/s | Draw | Tok/W |\n"
        "> |:---:|---:|---:|---:|\n"
        "> | 200 W | 20.0 | 199 W | 0.1 |\n"
    )
    df = import_summary(md)
    assert df.row(0, named=True) == {
        "cap_w": 200.0,
        "narr_tps": 20.0,
        "code_tps": None,
        "prefill_tps": None,
        "power_w": 199.0,
        "tps_per_w": 0.1,
    }


def test_import_without_table_is_a_usage_error(tmp_path: Path) -> None:
    md = tmp_path / "s.md"
    md.write_text("no table here\n| a | b |\n|---|---|\n| 1 | 2 |\n")
    with pytest.raises(UsageError, match="no power-cap table"):
        import_summary(md)
    with pytest.raises(UsageError, match="cannot read"):
        import_summary(tmp_path / "missing.md")


def test_escape_md() -> None:
    assert escape_md("a|b") == "a\\|b"
    assert escape_md("<script>x</script>") == "&lt;script&gt;x&lt;/script&gt;"
    assert escape_md("two\nlines  *bold* [link](x) `code`") == (
        "two lines \\*bold\\* \\[link\\](x) \\`code\\`"
    )
    assert escape_md(None) == ""


def _table_rows(text: str) -> list[str]:
    start = text.index("### Per-cap results")
    return [line for line in text[start:].splitlines() if line.startswith("| ")]


def test_summary_findings_first_failed_caps_and_escaping(tmp_path: Path) -> None:
    df = pl.DataFrame(
        {
            "cap_w": [200.0, 210.0, 220.0, 230.0],
            "narr_tps": [20.0, None, 22.0, 24.0],
            "power_w": [199.0, None, 219.0, 229.0],
            "status": ["ok", "failed", "ok", "ok"],
            "error": ["", "HTTP 500 | <b>oops</b>", "", ""],
        }
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    df.write_csv(run_dir / "caps.csv")
    run = {
        "schema_version": 1,
        "gpus": [
            {"name": "GPU | with pipe", "min_limit_w": 100, "default_limit_w": 250},
            {"name": "GPU | with pipe"},
        ],
        "cooling": "air",
        "load_mode": "decode-single",
        "server": {"model": "qwen_3*27b", "engine": "llama.cpp"},
    }
    (run_dir / "run.json").write_text(json.dumps(run))
    df = df.with_columns(pl.lit(2).alias("n_gpus"))
    df.write_csv(run_dir / "caps.csv")
    curve = load_curve(run_dir)
    text = render_summary(curve, analyze(curve))
    assert text.index("### Findings") < text.index("### Per-cap results")
    assert text.index("### Per-cap results") < text.index("<details>")
    assert "GPU \\| with pipe" in text and "qwen\\_3\\*27b" in text
    assert "| Cooling | air |" in text
    assert "| Date | unknown |" in text
    rows = _table_rows(text)
    header = rows[0]
    assert "Cap (W combined)" in header and "Power (W/card)" in header
    n_cols = header.count(" | ") + 1
    failed = next(r for r in rows if r.startswith("| 210 "))
    assert "failed" in failed and " 0.0" not in failed and "0.0000" not in failed
    assert "HTTP 500 \\| &lt;b&gt;oops&lt;/b&gt;" in failed
    # Escaped pipes do not add cells.
    assert all(r.replace("\\|", "").count(" | ") + 1 == n_cols for r in rows)
    ok_row = next(r for r in rows if r.startswith("| 220 "))
    assert "| 440 |" in ok_row and "| 109.5 |" in ok_row  # combined cap, draw per card


def test_summary_of_a_huge_run_stays_under_the_github_limit(tmp_path: Path) -> None:
    caps = [100.0 + i for i in range(200)]
    df = pl.DataFrame(
        {
            "cap_w": caps,
            "narr_tps": [20 + c / 50 for c in caps],
            "power_w": [c - 0.5 for c in caps],
            "status": ["ok"] * 190 + ["failed"] * 10,
            "error": [""] * 190 + ["x" * 400] * 10,
        }
    )
    path = tmp_path / "caps.csv"
    df.write_csv(path)
    curve = load_curve(path)
    text = render_summary(curve, analyze(curve))
    assert len(text) < 65_536
    assert "<details>" in text and "</details>" in text
    assert "### Findings" in text


def _mode_run(tmp_path: Path, name: str, mode: str, tps: list[float]) -> Path:
    run_dir = tmp_path / name
    run_dir.mkdir()
    caps = [250.0, 270.0, 290.0, 310.0]
    pl.DataFrame({"cap_w": caps, "narr_tps": tps, "power_w": caps}).write_csv(run_dir / "caps.csv")
    (run_dir / "run.json").write_text(json.dumps({"schema_version": 1, "load_mode": mode}))
    return run_dir


def test_cross_mode_minimises_the_worst_loss(tmp_path: Path) -> None:
    # Single-stream peaks at 250 W, concurrent at 310 W; 270/290 W are the compromises.
    single = load_curve(_mode_run(tmp_path, "a", "decode-single", [30.0, 31.0, 31.9, 32.0]))
    conc = load_curve(_mode_run(tmp_path, "b", "decode-concurrent", [50.0, 58.0, 64.0, 70.0]))
    typed = [(c, analyze(c)) for c in (single, conc)]
    result = cross_mode(typed).to_json()
    tpw_single = {250: 0.12, 270: 31 / 270, 290: 31.9 / 290, 310: 32 / 310}
    tpw_conc = {250: 0.2, 270: 58 / 270, 290: 64 / 290, 310: 70 / 310}
    worst = {c: max(1 - tpw_single[c] / 0.12, 1 - tpw_conc[c] / (70 / 310)) for c in tpw_single}
    best = min(worst, key=lambda c: worst[c])
    assert result["cap_w"] == best == 270
    assert result["worst_loss_pct"] == pytest.approx(worst[best] * 100)
    by_mode = {m["load_mode"]: m for m in result["modes"]}
    assert by_mode["decode-single"]["sweet_spot_cap_w"] == 250.0
    assert by_mode["decode-concurrent"]["tps_per_w_loss_pct"] == pytest.approx(
        (1 - tpw_conc[270] / (70 / 310)) * 100
    )
    with pytest.raises(UsageError):
        cross_mode(typed[:1])


def test_hint_commands_stay_code_and_unpaired_backticks_are_escaped() -> None:
    from powersweep.analysis.summary_frame import md_keep_code

    assert md_keep_code("run `nvidia-smi -pl 290` now_") == "run `nvidia-smi -pl 290` now\\_"
    assert md_keep_code("a ` b | c") == "a \\` b \\| c"


def test_import_keeps_every_known_column(tmp_path: Path) -> None:
    md = tmp_path / "s.md"
    md.write_text(
        "| Cap (W) | Decode TPS | Power (W) | TPS/W | SM clock (MHz) | Mem clock (MHz) "
        "| Temp max (°C) | P-state | Power throttle % | Thermal throttle % | Util % | Notes |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
        "| 300 | 30.0 | 299 | 0.100 | 1500 | 9751 | 71 | P2 | 100 | 0 | 98 | fine |\n"
        "| 350 | 33.0 | 334 | 0.099 | 1560 | 9751 | 83 | P2 | 5 | 40 | 99 | hot |\n"
    )
    df = import_summary(md)
    row = df.row(1, named=True)
    assert row["sm_clock_mhz"] == 1560.0 and row["mem_clock_mhz"] == 9751.0
    assert row["temp_max_c"] == 83.0 and row["pstate"] == 2.0
    assert row["pwr_throttle_pct"] == 5.0 and row["thermal_throttle_pct"] == 40.0
    assert row["util_pct"] == 99.0 and row["narr_tps"] == 33.0
    out = tmp_path / "caps.csv"
    write_caps_csv(df, out)
    result = analyze(load_curve(out)).to_json()
    assert result["caps"][1]["temp_max_c"] == 83.0


def test_import_keeps_the_load_mode_of_a_prefill_table(tmp_path: Path) -> None:
    md = tmp_path / "s.md"
    md.write_text(
        "| | |\n|---|---|\n| Load mode | prefill-heavy |\n\n"
        "| Cap (W) | TPS | Power (W) |\n|---|---|---|\n| 300 | 3000 | 299 |\n| 350 | 3300 | 340 |\n"
    )
    df = import_summary(md)
    assert df["prefill_tps"].to_list() == [3000.0, 3300.0]
    assert df["narr_tps"].to_list() == [None, None]
    out = tmp_path / "caps.csv"
    write_caps_csv(df, out)
    assert analyze(load_curve(out)).to_json()["metric"] == "prefill_tps"
    # The same table without a stated mode is decode.
    md.write_text("| Cap (W) | TPS | Power (W) |\n|---|---|---|\n| 300 | 30 | 299 |\n")
    assert import_summary(md)["narr_tps"].to_list() == [30.0]


def test_the_raw_csv_block_runs_no_spreadsheet_formula(tmp_path: Path) -> None:
    # issue 46: cells a server or a pasted table put there, copied into a spreadsheet
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    pl.DataFrame(
        {
            "cap_w": [200.0, 210.0, 220.0],
            "narr_tps": [20.0, None, 22.0],
            "power_w": [199.0, None, 219.0],
            "status": ["ok", "failed", "ok"],
            "error": ["", "=cmd|' /C calc'!A0", "@SUM(1+1)"],
        }
    ).write_csv(run_dir / "caps.csv")
    curve = load_curve(run_dir)
    text = render_summary(curve, analyze(curve))
    block = text[text.index("```csv") : text.index("```json")]
    assert "'=cmd|' /C calc'!A0" in block and "'@SUM(1+1)" in block
    assert ",=cmd" not in block and ",@SUM" not in block
    assert "200.0" in block  # numbers as they are


def test_import_names_a_row_whose_cells_do_not_fit_its_header(tmp_path: Path) -> None:
    # issue 46: one extra | shifted a row's columns silently (its TPS/W read 0.0)
    md = tmp_path / "summary.md"
    md.write_text(
        "| Cap (W) | Power (W) | TPS | TPS/W |\n|---|---|---|---|\n"
        "| 250 | 249.8 | 25.2 | 0.101 |\n| 290 | 289.6 | 32.3 | | 0.111 |\n"
    )
    with pytest.raises(UsageError) as info:
        import_summary(md)
    assert str(info.value) == (
        f"{md}: row 2 of the power-cap table ('290') has 5 cells where its header has 4: its "
        "figures would be read from the wrong columns; escape a | inside a cell as \\| or fix "
        "the row"
    )


def _load_section(tmp_path: Path, name: str, load: dict[str, object]) -> str:
    run_dir = _mode_run(tmp_path, name, "decode-concurrent", [30.0, 31.0, 31.9, 32.0])
    run = json.loads((run_dir / "run.json").read_text())
    (run_dir / "run.json").write_text(json.dumps({**run, "load": load}))
    curve = load_curve(run_dir)
    text = render_summary(curve, analyze(curve))
    if "### Load" not in text:
        return ""
    section = text[text.index("### Load") :]
    return section[: section.index("\n\n###")] if "\n\n###" in section[1:] else section


def test_the_load_section_shows_the_concurrency_pick_its_probe_and_a_prefill_prompt(
    tmp_path: Path,
) -> None:
    probe = [
        {"concurrency": 1, "tps": 30.04, "power_w": 250.0, "failures": 0, "queued": None},
        {"concurrency": 4, "tps": 98.0, "power_w": 290.5, "failures": 1, "queued": 2},
    ]
    concurrent = {
        "concurrency": 4,
        "concurrency_auto": True,
        "concurrency_stretch": 1,
        "pick_reason": "the knee_of the curve",
        "probe": probe,
        "effective_concurrency": 3,
        "pace": {"ignored": True},
    }
    assert _load_section(tmp_path, "c", concurrent).splitlines() == [
        "### Load",
        "",
        "- Concurrency: **4** streams (+1 stretch), picked by the auto probe: "
        "the knee\\_of the curve.",
        "- The server ran only 3 at once; the rest queued.",
        "",
        "| streams | TPS | draw W | failed | queued |",
        "|---:|---:|---:|---:|---:|",
        "| 1 | 30.0 | 250.0 | 0 | unknown |",
        "| 4 | 98.0 | 290.5 | 1 | 2 |",
    ]
    given = {"concurrency": 2, "concurrency_auto": False, "concurrency_stretch": 0}
    assert _load_section(tmp_path, "g", given).splitlines()[2] == (
        "- Concurrency: **2** streams, given: ."
    )
    prefill = {
        "prompt_tokens": 7900,
        "target_prefill_s": 10,
        "context_tokens": 8192,
        "clamped_to_context": True,
    }
    assert _load_section(tmp_path, "p", prefill).splitlines()[2:] == [
        "- Prefill prompt: ~7900 tokens, sized for 10 s of prefill at the highest cap.",
        "- **Clamped** to 90% of the server's 8192-token context: prefill takes less than the "
        "target.",
    ]
    assert _load_section(tmp_path, "s", {}) == ""
