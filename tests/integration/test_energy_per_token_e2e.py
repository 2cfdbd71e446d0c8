"""One definition of energy per token (issue 44): J/token and TPS/W describe the same seconds, so
on simulated sweeps of every load mode and a clock axis J/token x TPS/W is 1 within the two
stated precisions at every point, and two points of one operating point (the README sweep's
boost plateau, whatever the rounds each took) agree within theirs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.helpers.files import number_or_nan
from tests.integration.conftest import only_run_dir, powersweeps_side_by_side, read_csv

# the README sweep, and the other load modes and a clock axis by the same protocol
SWEEPS = {
    "readme": ("--simulate", "rtx3090-air", "--cooling", "air", "--load-mode", "decode-single"),
    "concurrent": (
        "--simulate", "rtx3090-air", "--cooling", "air", "--load-mode", "decode-concurrent",
        "--caps", "220,260,300,340,370",
    ),
    "prefill": (
        "--simulate", "rtx3090-air", "--cooling", "air", "--load-mode", "prefill-heavy",
        "--caps", "220,260,300,340,370",
    ),
    "sm-clock": ("--simulate", "h100-sxm", "--axis", "sm-clock", "--load-mode", "decode-single"),
}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("energy")
    args = [
        [*extra, "--no-charts", "-q", "--out", str(tmp / name), "--state-dir", str(tmp / "sd")]
        for name, extra in SWEEPS.items()
    ]
    for code, err in powersweeps_side_by_side(args, timeout=400):
        assert code == 0, err
    return {name: only_run_dir(tmp / name) for name in SWEEPS}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SWEEPS))
def test_j_per_token_times_tps_per_w_is_one_within_their_precisions(
    runs: dict[str, Path], name: str
) -> None:
    rows = [r for r in read_csv(runs[name] / "caps.csv") if r["status"] == "ok"]
    assert len(rows) >= 5
    stated = 0
    for r in rows:
        j, tpw = number_or_nan(r["j_per_token"]), number_or_nan(r["tps_per_w"])
        assert j > 0 and tpw > 0, r
        u_j, u_tpw = number_or_nan(r["j_per_token_u95_pct"]), number_or_nan(r["tps_per_w_u95_pct"])
        # a point whose TPS states no precision (one prefill prompt) states none for J/token
        assert math.isnan(u_j) == math.isnan(u_tpw), r
        if math.isnan(u_j):
            continue
        stated += 1
        assert u_j > 0
        gap = abs(j * tpw - 1.0)
        assert gap <= math.hypot(u_j, u_tpw) / 100.0, (r["cap_w"], r.get("sm_lock_mhz"), gap)
        # the counter's figure and the sampled draw's over the same seconds agree too
        assert number_or_nan(r["j_per_token_sampled"]) == pytest.approx(
            j, rel=math.hypot(u_j, 1.0) / 100
        )
        assert number_or_nan(r["kwh_per_mtok"]) == pytest.approx(j / 3.6, rel=1e-4)
    assert stated >= len(rows) - 2


@pytest.mark.slow
def test_the_boost_plateau_reads_one_energy_per_token_whatever_its_rounds(
    runs: dict[str, Path],
) -> None:
    rows = {
        float(r["cap_w"]): r for r in read_csv(runs["readme"] / "caps.csv") if r["status"] == "ok"
    }
    a, b = rows[340.0], rows[350.0]
    # the same draw and rate (the card never reaches either cap), measured in different rounds:
    # the issue saw 11.07 against 10.17 J/token here
    assert abs(number_or_nan(a["power_w"]) / number_or_nan(b["power_w"]) - 1.0) < 0.01
    gap = abs(number_or_nan(a["j_per_token"]) / number_or_nan(b["j_per_token"]) - 1.0)
    u = (
        math.hypot(number_or_nan(a["j_per_token_u95_pct"]), number_or_nan(b["j_per_token_u95_pct"]))
        / 100.0
    )
    assert gap <= u, (gap, u)
    plateau = [rows[c] for c in (340.0, 350.0, 360.0, 370.0)]
    joules = [number_or_nan(r["j_per_token"]) for r in plateau]
    assert max(joules) / min(joules) - 1.0 < 0.01, joules


@pytest.mark.slow
def test_the_summary_says_which_seconds_its_energy_per_token_covers(
    runs: dict[str, Path],
) -> None:
    text = (runs["readme"] / "summary.md").read_text()
    assert "energy counter over the seconds the TPS counts, as TPS/W" in text
    assert "J/token** ±" in text
