"""powersweep.plots.compare_charts: several runs as one markdown table (each sweet spot, ``—``
where unknown, cells that cannot break the table) and as one overlay chart (labels, normalised
curves, the x axis in watts or % of each run's default, errors naming the run)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import PowersweepError, UsageError
from powersweep.plots.compare_charts import compare_figure, compare_table, render_compare


def _compared_analysis(default: float | None = 370.0, **changes: Any) -> PowerAnalysis:
    base: dict[str, Any] = {
        "run": {"gpu_name": "RTX 3090", "n_gpus": 1, "load_mode": "decode-single"},
        "caps": [
            {"cap_w": 200, "tps": 20.0, "power_w": 200.0, "tps_per_w": 0.100},
            {"cap_w": 250, "tps": 27.5, "power_w": 250.0, "tps_per_w": 0.110},
            {"cap_w": 300, "tps": 30.0, "power_w": 300.0, "tps_per_w": 0.100},
        ],
        "sweet_spot": {
            "cap_w": 250,
            "tps_per_w": 0.11,
            "tps": 27.5,
            "power_w": 250.0,
            "pct_of_default": 67.6,
        },
        "near_peak": {"cap_w": 287.5, "tps_per_w": 0.105, "tps_loss_pct": 4},
    }
    base["run"]["default_limit_w"] = default
    return PowerAnalysis.from_json({**base, **changes})


def _table_cells(table: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in table.splitlines()[2:]]


def test_the_table_has_one_row_per_run_with_its_sweet_spot() -> None:
    table = compare_table([("run a", _compared_analysis())])
    lines = table.splitlines()
    # the run's label names its GPU, cooling, axis and load (issue 47): no columns of their own
    assert lines[0].startswith("| run | sweet spot | % of default | TPS/W |")
    assert table.endswith("\n")
    assert _table_cells(table) == [["run a", "250 W", "68%", "0.110", "27.5", "250 W", "287.5 W"]]


def test_unknowns_are_dashes_and_a_cell_cannot_break_the_table() -> None:
    bare = _compared_analysis(sweet_spot=None, near_peak=None, run={})
    partial = _compared_analysis(sweet_spot={"cap_w": 250, "tps_per_w": 0.11})
    table = compare_table([("a|b\nc", bare), ("partial", partial)])
    first, second = _table_cells(table)
    assert first[0] == "a\\|b c"
    assert first[1:] == ["—", "—", "—", "—", "—", "—"]
    assert second[1:6] == ["250 W", "—", "0.110", "—", "—"]


def test_a_rig_of_different_cards_gives_each_cards_share_of_its_default() -> None:
    spot = {"cap_w": 300, "tps_per_w": 0.1, "pct_of_default": 71, "pct_of_default_by_gpu": [81, 67]}
    (row,) = _table_cells(compare_table([("mixed", _compared_analysis(sweet_spot=spot))]))
    assert row[2] == "81% / 67%"


def test_a_run_that_cannot_be_read_is_named() -> None:
    with pytest.raises(UsageError, match="nothing to compare"):
        compare_table([])
    broken = PowerAnalysis.from_json({"caps": []})
    with pytest.raises(UsageError, match=r"^broken: analysis has no caps to plot"):
        compare_table([("ok", _compared_analysis()), ("broken", broken)])
    with pytest.raises(UsageError, match=r"does not follow its schema: .*\$\.caps"):
        PowerAnalysis.from_json({"caps": None})  # no caps list: refused before any chart


def test_the_overlay_labels_each_run_and_normalises_each_to_its_own_peak() -> None:
    runs = [("a", _compared_analysis()), ("b", _compared_analysis(sweet_spot=None))]
    ax = compare_figure(runs, normalize=True).axes[0]
    a_line, b_line = (next(x for x in ax.lines if x.get_gid() == f"run:{i}") for i in (0, 1))
    assert a_line.get_label() == "a: 250 W (68% of default), 0.110 TPS/W"
    assert b_line.get_label() == "b"
    assert np.asarray(a_line.get_ydata(), dtype=float) == pytest.approx([1 / 1.1, 1.0, 1 / 1.1])
    assert [x.get_gid() for x in ax.lines].count("sweet-spot:1") == 0  # b has none
    assert ax.get_ylabel() == "TPS/W (share of run's peak)"


def test_percent_of_default_needs_each_runs_default() -> None:
    runs = [("a", _compared_analysis()), ("no default", _compared_analysis(default=None))]
    with pytest.raises(UsageError, match=r"^no default: the run does not record its default"):
        compare_figure(runs, x="pct-tdp")


def test_render_makes_the_folder_and_refuses_one_it_cannot(tmp_path: Path) -> None:
    (path,) = render_compare(
        [("a", _compared_analysis())], tmp_path / "new" / "cmp", formats=("svg",)
    )
    assert path == tmp_path / "new" / "cmp.svg" and path.is_file()
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PowersweepError, match="cannot create"):
        render_compare([("a", _compared_analysis())], blocker / "cmp", formats=("svg",))


def test_each_run_draws_its_stated_intervals_as_a_band() -> None:
    # issue 47: the curves carry each cap's stated 95% interval; a run that states none has
    # no band
    stated = _compared_analysis()
    caps = [{**c, "tps_per_w_u95_pct": 2.0} for c in stated.to_json()["caps"]]
    stated = PowerAnalysis.from_json({**stated.to_json(), "caps": caps})
    ax = compare_figure([("a", stated), ("b", _compared_analysis())]).axes[0]
    bands = {c.get_gid(): c for c in ax.collections if str(c.get_gid()).startswith("interval:")}
    assert set(bands) == {"interval:0"}
    ys = bands["interval:0"].get_paths()[0].vertices[:, 1]
    assert max(ys) == pytest.approx(0.110 * 1.02) and min(ys) == pytest.approx(0.100 * 0.98)
