"""Every finding's advice works, for the power curve's findings (``analysis/core.py``,
``power_findings.py``, ``trust.py``; issue 44): each is raised on the simulated rig, its advice is
applied as the hint words it, and the finding goes. The list of every code and whether its advice
is testable is ``test_finding_advice.py``'s docstring. These read the CLI's behaviour only (codes,
hints, caps), so a rewrite of those modules keeps them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.conftest import read_csv
from tests.integration.test_finding_advice import README, _advice_sweep, _findings

pytestmark = pytest.mark.slow


def _caps_from(lo: float, hi: float, step: float) -> str:
    caps = []
    c = lo
    while c <= hi + 1e-9:
        caps.append(f"{c:g}")
        c += step
    return ",".join(caps)


def _hint_watts(hint: str) -> float:
    (w,) = re.findall(r"to (\d+(?:\.\d+)?) W", hint)
    return float(w)


def test_a_low_boundary_goes_once_the_caps_reach_the_limit_named(tmp_path: Path) -> None:
    run = _advice_sweep(tmp_path / "a", *README, "--caps", "300,310,320,330", "--no-confirm")
    found = _findings(run)["sweet_spot_at_low_boundary"]
    limit = _hint_watts(found["hint"])
    again = _advice_sweep(
        tmp_path / "b", *README, "--caps", _caps_from(limit, 330.0, 20.0), "--no-confirm"
    )
    assert "sweet_spot_at_low_boundary" not in _findings(again)


def test_a_high_boundary_goes_once_the_caps_reach_the_limit_named(tmp_path: Path) -> None:
    run = _advice_sweep(tmp_path / "a", *README, "--caps", "200,220,240,260", "--no-confirm")
    found = _findings(run)["sweet_spot_at_high_boundary"]
    limit = _hint_watts(found["hint"])
    caps = _caps_from(200.0, limit, 20.0) + f",{limit:g}"
    again = _advice_sweep(tmp_path / "b", *README, "--caps", caps, "--no-confirm")
    assert "sweet_spot_at_high_boundary" not in _findings(again)


def test_no_cap_binds_gives_way_to_the_clock_axis_it_names(tmp_path: Path) -> None:
    card = ("--simulate", "rx7900xtx", "--cooling", "air", "--no-confirm")
    found = _findings(_advice_sweep(tmp_path / "a", *card))["no_cap_binds"]
    assert "--axis sm-clock" in found["hint"]
    clocks = _findings(_advice_sweep(tmp_path / "b", *card, "--axis", "sm-clock"))
    assert "no_cap_binds" not in clocks and "clock_peak" in clocks


def test_a_draw_ceiling_in_decode_goes_under_the_load_mode_it_names(tmp_path: Path) -> None:
    card = ("--simulate", "rtx4090-air", "--cooling", "air", "--no-confirm")
    card += ("--caps", "350,400,450,500,550,600")
    found = _findings(_advice_sweep(tmp_path / "a", *card, "--load-mode", "decode-single"))
    assert "--load-mode prefill-heavy" in found["draw_ceiling"]["hint"]
    prefill = _findings(_advice_sweep(tmp_path / "b", *card, "--load-mode", "prefill-heavy"))
    assert "draw_ceiling" not in prefill


def test_the_adaptive_budget_goes_with_a_dense_sweep(tmp_path: Path) -> None:
    card = ("--simulate", "rtx3090-water", "--cooling", "water", "--no-confirm")
    found = _findings(_advice_sweep(tmp_path / "a", *card, "--strategy", "adaptive"))
    assert "sweep dense" in found["adaptive_budget"]["hint"]
    assert "adaptive_budget" not in _findings(
        _advice_sweep(tmp_path / "b", *card, "--strategy", "dense")
    )


def test_a_cap_not_measured_is_measured_when_rerun(tmp_path: Path) -> None:
    base = (*README, "--no-confirm")
    run = _advice_sweep(
        tmp_path / "a", *base, "--caps", "280,290,300,310", "--sim-fault", "no-tokens@300"
    )
    found = _findings(run)["caps_not_measured"]
    assert "300 W" in found["message"] and "rerun those caps" in found["hint"]
    again = _advice_sweep(tmp_path / "b", *base, "--caps", "300")
    # the cap, and a point read again at the run's end (the run-to-run term): all ok
    assert {r["status"] for r in read_csv(again / "caps.csv")} == {"ok"}
    assert "caps_not_measured" not in _findings(again)


def test_a_failed_run_says_to_sweep_again_and_a_sweep_without_the_fault_answers(
    tmp_path: Path,
) -> None:
    # every planned cap was tried and failed: --resume would measure none (a failed cap counts
    # as done), so the advice is a new sweep once the cause is fixed
    caps = ("--caps", "260,270,280,290,300,310")
    run = _advice_sweep(tmp_path / "a", *README, *caps, "--sim-fault", "no-tokens@+60", ok=False)
    found = _findings(run)["run_failed"]
    assert "sweep again once the cause is fixed" in found["hint"]
    assert "`--resume` would measure no caps" in found["hint"]
    again = _advice_sweep(tmp_path / "b", *README, *caps)
    assert "run_failed" not in _findings(again)
