"""``powersweep import`` of every table power-cap-sweep.sh (club-3090) has printed.

The headers below are the script's, verbatim, from its history: v1 (its first version, 83d5d975,
to 1ede998c), v2 (ab2796dd to e395a125: clocks, throttle, P-state), v3 (3cffb586 onwards:
per-card cap, combined draw, the mode's TPS label). Rows follow the script's ``printf``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.analysis import analyze, import_summary, load_curve, write_caps_csv
from powersweep.cli import main

V1 = "| Cap (W) | Narr wall TPS | Code wall TPS | Actual power (W) | GPU temp (°C) | TPS/W (narr) |"
V1_SEP = (
    "|--------:|--------------:|--------------:|-----------------:|--------------:|-------------:|"
)
V2 = (
    "| Cap (W) | Narr wall TPS | Code wall TPS | Actual power (W) | GPU temp (°C) | SM clk (MHz) "
    "| Mem clk (MHz) | Pwr-throttle % | P-state | TPS/W (narr) |"
)
V2_SEP = (
    "|--------:|--------------:|--------------:|-----------------:|--------------:|-------------:"
    "|--------------:|---------------:|:-------:|-------------:|"
)
V3_SEP = (
    "|-------------:|-------------------------:|-------------------------:|-----------------------"
    "-------------------:|------------------:|-------------:|--------------:|---------------:|:----"
    "---:|--------------------:|"
)
V3_LABELS = {
    "decode-single": "decode TPS",
    "decode-concurrent": "timed chunk TPS",
    "prefill-heavy": "prefill TPS",
}


def v3(label: str, cards: int, primary: int = 0) -> str:
    return (
        f"| Cap (W/card) | Narr {label} | Code {label} | Actual power combined ({cards} cards) (W) "
        f"| GPU temp max (°C) | SM clk GPU {primary} (MHz) | Mem clk GPU {primary} (MHz) "
        f"| Any-card pwr-throttle % | P-state GPU {primary} | Narr TPS/combined W |"
    )


def _page(mode: str, gpus: str, header: str, sep: str, rows: list[str]) -> str:
    return "\n".join(
        [
            f"# Power-cap sweep — NVIDIA GeForce RTX 3090 (GPUs {gpus})",
            "",
            f"**Load mode:** `{mode}` (bench-runs=1)",
            "",
            header,
            sep,
            *rows,
            "",
        ]
    )


def _import(tmp_path: Path, text: str) -> dict[str, list[float | None]]:
    md = tmp_path / "summary.md"
    md.write_text(text, encoding="utf-8")
    return import_summary(md).to_dict(as_series=False)


def test_v1_table(tmp_path: Path) -> None:
    rows = [
        "| 300 | 30.10 | 29.80 | 298.50 | 71 | 0.101 |",
        "| 250 | 28.00 | 27.90 | 249.1 | 64 | ? |",
    ]
    got = _import(tmp_path, _page("decode-single", "0", V1, V1_SEP, rows))
    assert got["cap_w"] == [250.0, 300.0]
    assert got["narr_tps"] == [28.0, 30.1] and got["code_tps"] == [27.9, 29.8]
    assert got["power_w"] == [249.1, 298.5] and got["temp_max_c"] == [64.0, 71.0]
    assert got["tps_per_w"] == [None, 0.101]
    assert got["n_gpus"] == [1.0, 1.0]


def test_v2_table(tmp_path: Path) -> None:
    rows = [
        "| 300 | 30.10 | 29.80 | 298.50 | 71 | 1695 | 9751 | 100 | P2 | 0.101 |",
        "| 250 | 28.00 | 27.90 | 249.10 | 64 | 1500 | 9751 | 98 | P2 | 0.112 |",
    ]
    got = _import(tmp_path, _page("decode-concurrent", "0", V2, V2_SEP, rows))
    assert got["narr_tps"] == [28.0, 30.1] and got["code_tps"] == [27.9, 29.8]
    assert got["sm_clock_mhz"] == [1500.0, 1695.0] and got["mem_clock_mhz"] == [9751.0, 9751.0]
    assert got["pwr_throttle_pct"] == [98.0, 100.0] and got["pstate"] == [2.0, 2.0]


@pytest.mark.parametrize("cards", [1, 2])
@pytest.mark.parametrize("mode", ["decode-single", "decode-concurrent"])
def test_v3_decode_tables_keep_the_code_column(tmp_path: Path, mode: str, cards: int) -> None:
    rows = [
        f"| 300 | 30.10 | 29.80 | {298.5 * cards:.2f} | 71 | 1695 | 9751 | 100 | P2 | 0.101 |",
        f"| 250 | 28.00 | 27.90 | {249.1 * cards:.2f} | 64 | 1500 | 9751 | 98 | P2 | 0.112 |",
    ]
    gpus = ",".join(str(i) for i in range(cards))
    got = _import(tmp_path, _page(mode, gpus, v3(V3_LABELS[mode], cards), V3_SEP, rows))
    # the issue: "Code decode TPS" held "decode" and was taken for a second narrative column
    assert got["code_tps"] == [27.9, 29.8]
    assert got["narr_tps"] == [28.0, 30.1]
    assert got["power_w"] == [round(249.1 * cards, 2), round(298.5 * cards, 2)]
    assert got["temp_max_c"] == [64.0, 71.0] and got["sm_clock_mhz"] == [1500.0, 1695.0]
    assert got["mem_clock_mhz"] == [9751.0, 9751.0] and got["pstate"] == [2.0, 2.0]
    assert got["pwr_throttle_pct"] == [98.0, 100.0] and got["tps_per_w"] == [0.112, 0.101]
    assert got["n_gpus"] == [float(cards)] * 2


def _row(width: int, cap: int, tps: float, power: float) -> str:
    cells = [cap, tps, tps, power, 71, 1695, 9751, 100, "P2", round(tps / power, 3)]
    if width == 6:  # v1: no clocks, throttle or P-state
        cells = [*cells[:5], cells[-1]]
    return "| " + " | ".join(str(c) for c in cells) + " |"


@pytest.mark.parametrize(
    ("header", "sep"), [(V1, V1_SEP), (V2, V2_SEP), (v3("prefill TPS", 2), V3_SEP)]
)
def test_prefill_tables_become_prefill_tps(tmp_path: Path, header: str, sep: str) -> None:
    width = header.count("|") - 1
    rows = [_row(width, 300, 3000.0, 598.0), _row(width, 250, 2800.0, 498.0)]
    got = _import(tmp_path, _page("prefill-heavy", "0,1", header, sep, rows))
    assert got["prefill_tps"] == [2800.0, 3000.0]
    # the script's code column repeats the prefill figure: caps.csv has no column for it
    assert got["narr_tps"] == [None, None] and got["code_tps"] == [None, None]
    assert got["n_gpus"] == [2.0, 2.0]
    out = tmp_path / "caps.csv"
    write_caps_csv(import_summary(tmp_path / "summary.md"), out)
    assert analyze(load_curve(out), bootstrap=0).to_json()["metric"] == "prefill_tps"


def test_a_two_card_import_says_its_draw_sums_two_cards(tmp_path: Path) -> None:
    rows = [
        f"| {c} | {t} | {t} | {2 * p} | 70 | 1600 | 9751 | 100 | P2 | ? |"
        for c, t, p in ((350, 34.0, 345), (300, 33.0, 299), (250, 30.0, 249), (200, 25.0, 199))
    ]
    md = tmp_path / "s.md"
    md.write_text(_page("decode-single", "0,1", v3("decode TPS", 2), V3_SEP, rows))
    out = tmp_path / "caps.csv"
    assert main(["import", str(md), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[0].endswith(",n_gpus")
    result = analyze(load_curve(out), bootstrap=0).to_json()
    # the combined draw is two cards': the analysis compares it with twice the cap
    assert result["run"]["n_gpus"] == 2
    assert [c["n_gpus"] for c in result["caps"]] == [2.0] * 4


def test_a_utf16_paste_imports_and_latin1_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        "| 300 | 30.10 | 29.80 | 298.50 | 71 | 0.101 |",
        "| 250 | 28.00 | 27.90 | 249.1 | 64 | ? |",
    ]
    md = tmp_path / "s.md"
    md.write_bytes(_page("decode-single", "0", V1, V1_SEP, rows).encode("utf-16"))
    assert import_summary(md)["narr_tps"].to_list() == [28.0, 30.1]
    md.write_bytes(
        _page("decode-single", "0", V1, V1_SEP, rows).replace("—", "-").encode("latin-1")
    )
    assert main(["import", str(md), "--out", str(tmp_path / "c.csv")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "Latin-1" in line
