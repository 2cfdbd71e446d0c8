"""powersweep.plots.latency: TPS/W against inter-token p95, from the typed analysis alone. Which
points are drawn, how each is named (a cap, or a clock point), the target line, the starred pick,
and the chart written into a folder."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import PowersweepError, UsageError
from powersweep.plots.latency import (
    PICK_GID,
    TARGET_GID,
    has_latency,
    latency_figure,
    render_latency_chart,
)


def _latency_analysis(**changes: Any) -> PowerAnalysis:
    base: dict[str, Any] = {
        "run": {"gpu_name": "RTX 3090", "load_mode": "decode-concurrent"},
        "caps": [
            {"cap_w": 300, "status": "ok", "itl_p95_ms": 30.0, "tps_per_w": 0.10},
            {"cap_w": 250, "status": "ok", "itl_p95_ms": 36.0, "tps_per_w": 0.12},
            {"cap_w": 200, "status": "failed", "itl_p95_ms": 50.0, "tps_per_w": 0.13},
            {"cap_w": 225, "status": "ok", "itl_p95_ms": None, "tps_per_w": 0.125},
            {"cap_w": 275, "itl_p95_ms": "33.5", "tps_per_w": 0.11},  # no status: measured
        ],
        "latency_target": {
            "max_itl_ms": 35,
            "met": True,
            "point": {"cap_w": 275, "itl_p95_ms": 33.5, "tps_per_w": 0.11},
        },
    }
    return PowerAnalysis.from_json({**base, **changes})


def _first_axes_texts(fig: Any) -> list[str]:
    return [t.get_text() for t in fig.axes[0].texts]


def test_only_usable_points_with_an_inter_token_p95_are_drawn() -> None:
    fig = latency_figure(_latency_analysis())
    ax = fig.axes[0]
    (measured,) = [line for line in ax.lines if line.get_label() == "measured point"]
    assert list(measured.get_xdata()) == [30.0, 36.0, 33.5]
    assert list(measured.get_ydata()) == [0.10, 0.12, 0.11]
    assert _first_axes_texts(fig)[:3] == ["300 W", "250 W", "275 W"]
    assert ax.get_title() == "RTX 3090: efficiency against latency (decode-concurrent)"


def test_the_target_is_a_line_and_a_met_targets_point_is_starred() -> None:
    ax = latency_figure(_latency_analysis(), title="pick").axes[0]
    (target,) = [line for line in ax.lines if line.get_gid() == TARGET_GID]
    assert list(target.get_xdata()) == [35.0, 35.0]
    (pick,) = [line for line in ax.lines if line.get_gid() == PICK_GID]
    assert (list(pick.get_xdata()), list(pick.get_ydata())) == ([33.5], [0.11])
    assert pick.get_label() == "pick: 275 W"
    assert ax.get_title() == "pick: efficiency against latency (decode-concurrent)"


def test_an_unmet_target_stars_nothing_and_no_target_draws_no_line() -> None:
    unmet = _latency_analysis(latency_target={"max_itl_ms": 10, "met": False, "point": None})
    ax = latency_figure(unmet).axes[0]
    assert not [line for line in ax.lines if line.get_gid() == PICK_GID]
    assert [line.get_gid() for line in ax.lines].count(TARGET_GID) == 1
    bare = latency_figure(_latency_analysis(latency_target=None, run={})).axes[0]
    assert not [line for line in bare.lines if line.get_gid() in (PICK_GID, TARGET_GID)]
    assert bare.get_title() == "GPU: efficiency against latency"


def test_clock_runs_name_their_points_by_lock() -> None:
    analysis = {
        "kind": "clocks",
        "caps": [{"cap_w": 300, "itl_p95_ms": 30.0, "tps_per_w": 0.5}],  # not read
        "points": [
            {"sm_lock_mhz": 1410, "mem_lock_mhz": None, "itl_p95_ms": 30.0, "tps_per_w": 0.1},
            {"sm_lock_mhz": None, "mem_lock_mhz": 9501, "itl_p95_ms": 31.0, "tps_per_w": 0.1},
            {"sm_lock_mhz": 1200, "mem_lock_mhz": 5001, "itl_p95_ms": 32.0, "tps_per_w": 0.1},
            {"sm_lock_mhz": None, "mem_lock_mhz": None, "itl_p95_ms": 33.0, "tps_per_w": 0.1},
        ],
        "latency_target": {
            "met": True,
            "point": {"sm_lock_mhz": 1200, "mem_lock_mhz": 5001, "itl_p95_ms": 32.0},
        },
    }
    fig = latency_figure(ClockAnalysis.from_json(analysis))
    assert _first_axes_texts(fig) == [
        "SM 1410",
        "mem 9501",
        "SM 1200 / mem 5001",
        "unlocked",
    ]
    (pick,) = [line for line in fig.axes[0].lines if line.get_gid() == PICK_GID]
    assert pick.get_label() == "pick: SM 1200 / mem 5001"


def test_nothing_to_plot_is_a_usage_error() -> None:
    none = _latency_analysis(
        caps=[{"cap_w": 300, "status": "ok", "itl_p95_ms": None, "tps_per_w": 1}]
    )
    assert has_latency(_latency_analysis()) and not has_latency(none)
    assert not has_latency(PowerAnalysis.from_json({}))
    with pytest.raises(UsageError, match=r"no point has an inter-token p95 \(itl_p95_ms\)"):
        latency_figure(none)


def test_render_writes_latency_into_a_new_folder(tmp_path: Path) -> None:
    (path,) = render_latency_chart(_latency_analysis(), tmp_path / "charts", formats=("svg",))
    assert path == tmp_path / "charts" / "latency.svg" and path.stat().st_size > 1000


def test_render_refuses_a_bad_format_or_folder_in_one_line(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unsupported chart format 'gif'"):
        render_latency_chart(_latency_analysis(), tmp_path, formats=("gif",))
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PowersweepError, match="cannot create chart folder"):
        render_latency_chart(_latency_analysis(), blocker / "charts", formats=("svg",))


def test_an_undervolt_search_has_no_latency_chart() -> None:
    # it has no latency target: `analyze UNDERVOLT_RUN --max-itl-ms 40` drew nothing and ended
    # in an internal error (no ``caps``) where it should say nothing of latency
    from powersweep.analysis.undervolt_result_types import UndervoltAnalysis

    steps = [{"sm_lock_mhz": 1485.0, "sm_offset_mhz": 0.0, "status": "ok", "itl_p95_ms": 20.0}]
    assert not has_latency(UndervoltAnalysis.from_json({"steps": steps}))
