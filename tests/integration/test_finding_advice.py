"""Every finding's advice works (issue 44): each finding code whose "Try:" is an action the tool
(or a user of the simulated rig) can take is raised, its advice is applied as a user would (the
flag it names, the caps it names, the load mode or axis it names, the target it says to loosen),
and the finding is shown to change or go.

Every code the analysis raises (``finding(`` in ``powersweep/``), and whether its advice is
tested here:

steadiness (``analysis/steadiness.py``)
    still_heating            tested: ``--thermal-wait-seconds N`` as the hint says, on the README
                             sweep; the points it names wait longer and the finding shrinks
    energy_mismatch          tested: a counter off by one gain at every point is named a sensor to
                             check against a meter (hardware: nothing the tool can change), and
                             sampling faster indeed leaves it; the other cause's advice (sample
                             faster, for a draw the samples miss) has no simulated cause yet
requests and serving (``analysis/requests.py``, ``analysis/serving.py``)
    request_no_usage         tested: a server that reports usage (``--sim-server llamacpp``)
    request_packed_chunks    advice is "nothing": informational
    request_extra_chunks, request_ignored_max_tokens, request_no_finish, request_bad_events,
    request_not_streamed     advice is to check or reconfigure the server or a proxy: outside
                             the tool (the simulator has no switch for a user's proxy)
    server_rate_mismatch     advice is to check a proxy or the server's batching: outside the tool
    server_rates_agree       informational
    latency_target_unmet     tested: ``analyze --max-itl-ms`` loosened as the hint says
    latency_target           informational (``apply --objective slo`` sets it: a setting, not a
                             finding's change)
    serving_answer           informational, no hint: a serving run's answer is TPS/W of its
                             windows' tokens, its points' energy per request named (issue 49's
                             operating map, a later phase, picks by it)
power curve (``analysis/core.py``, ``power_findings.py``, ``trust.py``: rewritten apart; their
tests are together in ``test_finding_advice_power.py``)
    sweet_spot_at_low_boundary, sweet_spot_at_high_boundary
                             tested: the caps extended to the limit the hint names
    no_cap_binds             tested: ``--axis sm-clock`` as the hint says (RX 7900 XTX)
    draw_ceiling             tested: ``--load-mode prefill-heavy`` as the hint says (RTX 4090)
    adaptive_budget          tested: a dense sweep, as the hint says (RTX 3090, water)
    caps_not_measured        tested: the failed cap rerun once its fault is gone
    run_failed, run_partial  tested (expected to fail today): ``--resume`` as the hint says
                             refuses a run whose failed caps count as done
    workload_too_small, under_loaded
                             advice (a larger model, more concurrency; nothing else on the
                             server) needs a server that cannot keep the card busy: the simulated
                             server always does, so no sweep raises them
    thermal_limited          advice is better cooling: hardware
    bandwidth_bound          advice is a memory overclock (power) or none (clock): hardware
    boost_plateau, sweet_spot, near_peak, cost_objective, confirm_pooled, regimes
                             informational (the caps to set, not a defect to fix)
    rows_ignored, implausible_rows, duplicate_cap, input_note, suspect_caps, no_usable_caps,
    run_faults               advice is about a hand-made file's rows or the server's faults:
                             the run's inputs, not an action of the tool (duplicate_cap's
                             "remove the rows" is the analysis's own unit tests')
    streams_stalled          tested: swept again with nothing else on the card (the simulated
                             rig's other tenant, ``--sim-world hiccups``, gone), as the hint says
clock curve (``analysis/clock_analysis.py``)
    clock_peak, tier_caps_tps, power_cap_does_not_bind, bandwidth_bound, no_usable_points
                             informational
    points_rejected, points_failed
                             advice is the card's supported clocks: the card's, not the tool's
undervolt (``analysis/undervolt.py``)
    undervolt_unstable, soak_failed, no_undervolt, undervolt_tied, no_steps
                             informational (no hint)
    gpu_reset                advice is about the server a reset interrupted: outside the tool
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import powersweep, read_csv, read_json, sweep_run_dir

pytestmark = pytest.mark.slow

README = ("--simulate", "rtx3090-air", "--cooling", "air", "--load-mode", "decode-single")


def _advice_sweep(out: Path, *args: str, ok: bool = True) -> Path:
    """A sweep without charts or progress, its journal under ``out``: its run directory (its
    exit checked unless ``ok`` is False)."""
    quiet = ("--no-charts", "-q", "--state-dir", str(out / "sd"))
    return sweep_run_dir(out, *args, *quiet, timeout=400, check=ok)


def _findings(run: Path) -> dict[str, dict[str, Any]]:
    return {f["code"]: f for f in read_json(run / "analysis.json")["findings"]}


def _named_points(message: str) -> set[str]:
    """The ``290 W`` / ``SM 1410 MHz`` points a finding's message names with their figures."""
    return set(re.findall(r"(\d+(?:\.\d+)? W|SM \d+ MHz) \(", message))


def _ok_rows_by_name(run: Path) -> dict[str, dict[str, str]]:
    """caps.csv's first ok row of each cap, by the name a finding gives it."""
    out: dict[str, dict[str, str]] = {}
    for r in read_csv(run / "caps.csv"):
        if r["status"] == "ok":
            out.setdefault(f"{float(r['cap_w']):g} W", r)
    return out


# --- steadiness ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _advice_sweep(tmp_path_factory.mktemp("readme"), *README)


def test_still_heating_waits_as_its_advice_says_and_shrinks(tmp_path: Path) -> None:
    # four caps around the sweet spot: the first is measured while the card still heats from
    # its warm-up, close enough to the best for its bias to change the answer
    near_best = (*README, "--caps", "300,290,280,270")
    first = _advice_sweep(tmp_path / "a", *near_best)
    found = _findings(first)["still_heating"]
    named = _named_points(found["message"])
    assert named
    (seconds,) = re.findall(r"--thermal-wait-seconds (\d+)", found["hint"])
    again = _advice_sweep(tmp_path / "b", *near_best, "--thermal-wait-seconds", seconds)
    after = _findings(again).get("still_heating")
    still = _named_points(after["message"]) if after else set()
    assert len(still) < len(named), (named, still)
    # the points it named waited longer (as their neighbours did: a point after a longer wait
    # may need less), each within the bound the advice gave
    before_rows, after_rows = _ok_rows_by_name(first), _ok_rows_by_name(again)

    def waited(rows: dict[str, dict[str, str]]) -> float:
        return sum(float(rows[p]["thermal_wait_s"]) for p in named)

    assert waited(after_rows) > waited(before_rows)
    assert all(float(r["thermal_wait_s"]) <= float(seconds) + 0.6 for r in after_rows.values())


def test_a_counter_gain_is_named_a_sensor_that_sampling_faster_leaves(tmp_path: Path) -> None:
    drift = (
        "--simulate",
        "rtx3090-air~0~energy-drift",
        "--cooling",
        "air",
        "--caps",
        "250,290,330",
    )
    drift += ("--load-mode", "decode-single", "--no-confirm")
    found = _findings(_advice_sweep(tmp_path / "a", *drift))["energy_mismatch"]
    assert "at every point alike" in found["hint"] and "--sample-interval" not in found["hint"]
    # what the old advice asked for changes nothing: the gain is the counter's
    faster = _findings(_advice_sweep(tmp_path / "b", *drift, "--sample-interval", "0.1"))
    assert "energy_mismatch" in faster
    gains = [
        re.findall(r"\(\+(\d+\.\d)%\)", f["message"]) for f in (found, faster["energy_mismatch"])
    ]
    assert all(abs(float(a) - float(b)) <= 0.3 for a, b in zip(*gains, strict=True)), gains


# --- requests and serving -----------------------------------------------------------------------


def test_stalls_go_when_nothing_else_runs_on_the_card(tmp_path: Path) -> None:
    caps = (*README, "--caps", "280,300,320", "--no-confirm")
    found = _findings(_advice_sweep(tmp_path / "a", *caps, "--sim-world", "hiccups"))[
        "streams_stalled"
    ]
    assert "stated at that share" in found["message"]
    assert "sweep when nothing else runs" in found["hint"]
    assert "streams_stalled" not in _findings(_advice_sweep(tmp_path / "b", *caps))


def test_no_usage_goes_with_a_server_that_reports_it(tmp_path: Path) -> None:
    base = (*README, "--caps", "280,300", "--no-confirm", "--sim-tokens-per-chunk", "3")
    found = _findings(_advice_sweep(tmp_path / "a", *base, "--sim-server", "plain"))
    assert "use a server that reports it" in found["request_no_usage"]["hint"]
    # llama.cpp reports its tokens in every stream's last chunk
    assert "request_no_usage" not in _findings(
        _advice_sweep(tmp_path / "b", *base, "--sim-server", "llamacpp")
    )


def test_an_unmet_latency_target_is_met_once_loosened(readme_run: Path, tmp_path: Path) -> None:
    tight = powersweep(
        "analyze", str(readme_run), "--max-itl-ms", "5", "--out", str(tmp_path / "a")
    )
    assert tight.returncode == 0, tight.stderr
    unmet = _findings(tmp_path / "a")["latency_target_unmet"]
    assert "loosen the target" in unmet["hint"]
    # loosened to what the points measured (their p95s' own upper bounds)
    highs = [
        float(r["itl_p95_hi_ms"] or r["itl_p95_ms"]) for r in _ok_rows_by_name(readme_run).values()
    ]
    loose = f"{max(highs) + 1.0:.0f}"
    again = powersweep(
        "analyze", str(readme_run), "--max-itl-ms", loose, "--out", str(tmp_path / "b")
    )
    assert again.returncode == 0, again.stderr
    found = _findings(tmp_path / "b")
    assert "latency_target_unmet" not in found and "latency_target" in found
