"""powersweep.analysis.fleet_cards: runs found under the paths given, a run read as one card
(its settings, figures and own answers on any axis, a fresh analysis.json reused and a stale one
analysed again), a card's values between its settings and its reference, and cards named
uniquely."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest

from powersweep import __version__
from powersweep.analysis.fleet_axis import AXES
from powersweep.analysis.fleet_cards import (
    CardCurve,
    card_of,
    common_root,
    discover_runs,
    unique_labels,
    unreadable,
)
from powersweep.analysis.load import load_curve
from powersweep.errors import UsageError

NAN = math.nan
POWER_CSV = (
    "cap_w,narr_tps,power_w,temp_max_c,thermal_throttle_pct,status\n"
    "200,20,199,60,0,ok\n250,28,249,65,,ok\n300,30,299,,40,ok\n350,,,,,failed\n"
)
RUN = {
    "status": "complete",
    "host": "node7",
    "load_mode": "decode-single",
    "server": {"model": "qwen"},
    "gpus": [
        {
            "index": 0,
            "name": "Test GPU",
            "uuid": "GPU-1",
            "default_limit_w": 300.0,
            "min_limit_w": 150.0,
            "max_limit_w": 400.0,
        }
    ],
}


def _run(path: Path, caps: str = POWER_CSV, run: dict | None = None) -> Path:
    path.mkdir(parents=True)
    (path / "caps.csv").write_text(caps)
    if run is not None:
        (path / "run.json").write_text(json.dumps(run))
    return path


def test_discover_runs_finds_runs_and_skips_their_own_folders(tmp_path: Path) -> None:
    a = _run(tmp_path / "fleet" / "a")
    (a / "charts").mkdir()
    (a / "nested").mkdir()
    (a / "nested" / "caps.csv").write_text("")  # inside a run: not another run
    b = _run(tmp_path / "fleet" / "x" / "b")
    _run(tmp_path / "fleet" / ".hidden")
    assert discover_runs([tmp_path / "fleet"]) == [a.resolve(), b.resolve()]
    # a run itself, its caps.csv, and the same run twice are one run
    assert discover_runs([a, a / "caps.csv", b]) == [a.resolve(), b.resolve()]


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("missing", "no such file or directory"),
        ("notes.txt", "give run directories or folders holding them"),
        ("empty", "no run directory (with a caps.csv) under it"),
    ],
)
def test_discover_runs_refuses_paths_without_runs(tmp_path: Path, name: str, error: str) -> None:
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError) as exc:
        discover_runs([tmp_path / name])
    assert str(exc.value) == f"{tmp_path / name}: {error}"


def test_unreadable_adds_how_the_sweep_ended(tmp_path: Path) -> None:
    assert unreadable(tmp_path, "bad").to_json() == {"run_dir": str(tmp_path), "error": "bad"}
    (tmp_path / "run.json").write_text(json.dumps({"status": "failed", "error": 42}))
    assert unreadable(tmp_path, "bad").to_json() == {
        "run_dir": str(tmp_path),
        "error": "42",
        "status": "failed",
    }
    (tmp_path / "run.json").write_text(json.dumps({"status": "interrupted"}))
    assert unreadable(tmp_path, "bad").error == "bad (no error recorded)"
    (tmp_path / "run.json").write_text(json.dumps({"status": "complete", "error": "x"}))
    assert unreadable(tmp_path, "bad").to_json() == {"run_dir": str(tmp_path), "error": "bad"}


def test_common_root() -> None:
    assert common_root([Path("/a/b/c"), Path("/a/b/d/e")]) == Path("/a/b")
    assert common_root([Path("/a/b")]) == Path("/a/b")
    assert common_root([Path("/a"), Path("rel")]) == Path("/")


def test_a_power_run_is_one_card_with_its_own_answers(tmp_path: Path) -> None:
    run = _run(tmp_path / "fleet" / "r1", run={**RUN, "options": {"hold_cap_w": 0}})
    card = card_of(load_curve(run), tmp_path / "fleet", 5.0, reanalyze=True)
    assert card is not None
    assert card.label == "node7" and card.host == "node7" and card.run_dir == str(run)
    assert card.key == ("Test GPU", 1, "decode-single", "qwen", "power")
    assert card.axis is AXES["power"] and card.metric == "narr_tps"
    assert card.x.tolist() == [200.0, 250.0, 300.0]  # the failed cap is no setting
    assert np.isnan(card.tier).all()
    assert card.tps.tolist() == [20.0, 28.0, 30.0]
    assert card.temp_c.tolist()[:2] == [60.0, 65.0] and math.isnan(card.temp_c[2])
    assert card.thermal_pct.tolist() == [0.0, 0.0, 40.0]
    assert card.best == (250.0, card.best[1]) and math.isnan(card.best[1])
    assert card.envelope_w == (150.0, 300.0, 400.0)
    assert (card.status, card.error, card.gpus) == ("complete", None, (("GPU-1", "Test GPU"),))
    assert card.held_cap_w is None and card.defaults_w == ()


def test_a_bare_run_is_named_by_its_path_and_unknowns_are_said(tmp_path: Path) -> None:
    run = _run(tmp_path / "fleet" / "x" / "bare")
    card = card_of(load_curve(run), tmp_path / "fleet", 5.0, reanalyze=True)
    assert card is not None
    assert card.label == os.path.join("x", "bare") and card.host is None
    assert card.key == ("unknown GPU", 1, "unknown mode", "unknown model", "power")
    assert card.status == "unknown" and all(math.isnan(v) for v in card.envelope_w)


def test_a_clock_grid_run_is_a_card_with_tiers(tmp_path: Path) -> None:
    lines = ["sm_lock_mhz,mem_lock_mhz,narr_tps,power_w"]
    for mem in (9001, 7001):
        for sm, tps, w in ((1200, 30.0, 200.0), (1500, 36.0, 220.0), (1800, 38.0, 260.0)):
            lines.append(f"{sm},{mem},{tps * mem / 9001:.3f},{w + mem / 1000:.1f}")
    run = _run(tmp_path / "g", "\n".join(lines) + "\n", {**RUN, "options": {"hold_cap_w": 280}})
    card = card_of(load_curve(run), tmp_path, 5.0, reanalyze=True)
    assert card is not None
    assert card.axis is AXES["grid"] and card.key[4] == "grid"
    assert card.tier.tolist() == [7001.0] * 3 + [9001.0] * 3
    assert card.x.tolist() == [1200.0, 1500.0, 1800.0] * 2
    assert card.best == (1500.0, 9001.0)
    assert card.held_cap_w == 280.0
    assert card.reference == (1800.0, 9001.0)  # the highest lock of the highest tier


def test_a_run_without_a_usable_setting_is_no_card(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", "cap_w,narr_tps,power_w,status\n300,30,299,failed\n")
    assert card_of(load_curve(run), tmp_path, 5.0, reanalyze=True) is None


def _stored(run: Path, **changes: object) -> None:
    """Write an analysis.json whose sweet spot (200 W) differs from the one the curve gives."""
    doc = json.loads(json.dumps(_analysis_of(run)))
    doc["sweet_spot"]["cap_w"] = 200.0
    doc.update(changes)
    (run / "analysis.json").write_text(json.dumps(doc))


def _analysis_of(run: Path) -> dict:
    from powersweep.analysis.core import analyze

    return analyze(load_curve(run), bootstrap=0, max_tps_loss_pct=5.0).to_json()


def test_a_fresh_analysis_json_is_reused_and_a_stale_one_is_not(tmp_path: Path) -> None:
    run = _run(tmp_path / "r", run=RUN)
    curve = load_curve(run)
    _stored(run)
    card = card_of(curve, tmp_path, 5.0, reanalyze=False)
    assert card is not None and card.best[0] == 200.0  # read back, not analysed again
    assert card_of(curve, tmp_path, 5.0, reanalyze=True).best[0] == 250.0  # type: ignore[union-attr]
    assert card_of(curve, tmp_path, 10.0, reanalyze=False).best[0] == 250.0  # type: ignore[union-attr]
    for stale in (
        {"tool": {"name": "powersweep", "version": __version__ + ".old"}},
        {"metric": "prefill_tps"},
        {"schema_version": 2},
        {"kind": "clocks"},
        {"sweet_spot": {"cap_w": "high"}},  # does not follow the schema
    ):
        _stored(run, **stale)
        assert card_of(curve, tmp_path, 5.0, reanalyze=False).best[0] == 250.0, stale  # type: ignore[union-attr]
    _stored(run)
    older = (run / "caps.csv").stat().st_mtime - 10
    os.utime(run / "analysis.json", (older, older))  # caps.csv changed after it was written
    assert card_of(curve, tmp_path, 5.0, reanalyze=False).best[0] == 250.0  # type: ignore[union-attr]


def _card(
    x: list[float], tps: list[float], power: list[float], tier: list[float] | None = None
) -> CardCurve:
    n = len(x)
    axis = AXES["power"] if tier is None else AXES["grid"]
    return CardCurve(
        label="c",
        run_dir="/r/c",
        key=("G", 1, "m", "model", axis.name),
        axis=axis,
        metric="narr_tps",
        x=np.array(x),
        tier=np.array(tier if tier is not None else [NAN] * n),
        tps=np.array(tps),
        power_w=np.array(power),
        temp_c=np.full(n, NAN),
        thermal_pct=np.zeros(n),
        best=(x[0], NAN),
        near_peak=(NAN, NAN),
        envelope_w=(150.0, 320.0, 400.0),
        status="complete",
        error=None,
    )


def test_a_card_is_interpolated_inside_its_range_and_clamped_to_it() -> None:
    card = _card([200.0, 300.0], [20.0, 30.0], [200.0, 280.0])
    assert card.at(250.0) == (25.0, 240.0)
    assert card.at(200.0) == (20.0, 200.0)
    assert all(math.isnan(v) for v in card.at(301.0))
    assert all(math.isnan(v) for v in card.at(NAN))
    assert card.clamped(150.0) == 200.0 and card.clamped(350.0) == 300.0
    assert card.clamped(260.0) == 260.0 and math.isnan(card.clamped(NAN))
    assert card.reference[0] == 320.0 and math.isnan(card.reference[1])  # the default limit


def test_a_grid_card_answers_in_its_tiers_only() -> None:
    card = _card(
        [1200.0, 1800.0, 1200.0],
        [30.0, 36.0, 25.0],
        [200.0, 260.0, 190.0],
        [9001.0, 9001.0, 7001.0],
    )
    assert card.at(1500.0, 9001.0) == (33.0, 230.0)
    assert all(math.isnan(v) for v in card.at(1500.0, 7001.0))  # one point: 1500 is outside it
    assert card.at(1200.0, 7001.0) == (25.0, 190.0)
    assert math.isnan(card.clamped(1500.0, 5001.0))  # a tier it did not measure
    assert card.reference == (1800.0, 9001.0)


def test_unique_labels_fall_back_to_the_path_where_a_host_repeats(tmp_path: Path) -> None:
    base = _card([200.0], [20.0], [200.0])
    a = base.__class__(**{**base.__dict__, "label": "node1", "run_dir": str(tmp_path / "x" / "a")})
    b = base.__class__(**{**base.__dict__, "label": "node1", "run_dir": str(tmp_path / "y" / "b")})
    c = base.__class__(**{**base.__dict__, "label": "node2", "run_dir": str(tmp_path / "z")})
    other = base.__class__(**{**a.__dict__, "key": ("H", 1, "m", "model", "power")})
    out = unique_labels([a, b, c, other], tmp_path)
    assert [card.label for card in out] == [
        os.path.join("x", "a"),
        os.path.join("y", "b"),
        "node2",
        "node1",
    ]
