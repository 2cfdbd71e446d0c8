"""powersweep.plots._style: output formats checked and normalised, the fixed style applied only
inside its block, figures on an Agg canvas, and saving that is byte-identical, atomic and fails
in one line."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from powersweep.errors import PowersweepError, UsageError
from powersweep.plots._style import (
    DPI,
    FIG_WIDTH_IN,
    check_formats,
    freeze_layout,
    new_figure,
    save_figure,
    style,
)


@pytest.mark.parametrize(
    ("given", "formats"),
    [
        (("png",), ("png",)),
        ("svg", ("svg",)),  # one string is one format, not three letters
        ((".PNG", "svg", "png"), ("png", "svg")),  # dot and case dropped, repeats once
    ],
)
def test_formats_are_normalised(given: tuple[str, ...] | str, formats: tuple[str, ...]) -> None:
    assert check_formats(given) == formats


def test_an_unknown_or_missing_format_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"unsupported chart format 'jpg'; use one of png, svg"):
        check_formats(("png", "jpg"))
    with pytest.raises(UsageError, match="no chart format given"):
        check_formats(())


def test_the_style_holds_only_inside_its_block() -> None:
    before = dict(matplotlib.rcParams)
    with style():
        assert matplotlib.rcParams["font.size"] == 9.0
        assert matplotlib.rcParams["svg.hashsalt"] == "powersweep"
    assert dict(matplotlib.rcParams) == before


def _small_figure() -> Figure:
    with style():
        fig = new_figure(height_in=2.0)
        ax = fig.add_subplot()
        ax.plot([1, 2, 3], [3, 1, 2], label="x")
        ax.legend()
    return fig


def test_a_new_figure_has_the_fixed_size_an_agg_canvas_and_can_be_frozen() -> None:
    with style():
        fig = new_figure(height_in=2.0)
        ax = fig.add_subplot()
        assert isinstance(fig.canvas, FigureCanvasAgg)
        assert tuple(fig.get_size_inches()) == (FIG_WIDTH_IN, 2.0)
        assert fig.dpi == DPI
        freeze_layout(fig)
        pos = ax.get_position().bounds
        ax.set_title("a long title added after the layout was frozen " * 2)
        fig.draw_without_rendering()
        assert ax.get_position().bounds == pos  # placed later, nothing moves


def test_saving_twice_gives_identical_files_and_leaves_no_temporary(tmp_path: Path) -> None:
    first = save_figure(_small_figure(), tmp_path / "chart", ("svg", "png"))
    assert [p.name for p in first] == ["chart.svg", "chart.png"]
    svg, png = (p.read_bytes() for p in first)
    assert png.startswith(b"\x89PNG") and b"<svg" in svg[:2000]
    assert b"Matplotlib" not in png  # no version in the metadata
    again = save_figure(_small_figure(), tmp_path / "again", ("svg", "png"))
    assert [p.read_bytes() for p in again] == [svg, png]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "again.png",
        "again.svg",
        "chart.png",
        "chart.svg",
    ]


def test_a_file_that_cannot_be_written_is_one_powersweep_error(tmp_path: Path) -> None:
    with pytest.raises(PowersweepError, match=r"cannot write chart .*missing/chart\.png"):
        save_figure(_small_figure(), tmp_path / "missing" / "chart", ("png",))
    assert not (tmp_path / "missing").exists()
