"""Fixed chart style, figure creation and deterministic saving.

No pyplot: figures are built with the object API on an Agg canvas, and rcParams are only ever set
inside :func:`style`, so the user's matplotlib configuration and global state stay untouched.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from powersweep.errors import PowersweepError, UsageError
from powersweep.safe_files import write_atomic

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

# 8 in x 200 dpi = 1600 px: sharp on GitHub, which shows images about 880 px wide.
FIG_WIDTH_IN = 8.0
FIG_HEIGHT_IN = 4.8
DPI = 200

SUPPORTED_FORMATS = ("png", "svg")

COLORS = {
    "tps": "#1f5fa8",
    "code_tps": "#6fa8dc",
    "tps_per_w": "#c0392b",
    "power": "#1f5fa8",
    "sm_clock": "#1f5fa8",
    "mem_clock": "#8e44ad",
    "temp": "#d35400",
    "cap": "#555555",
    "boost_plateau": "#f5b041",
    "draw_ceiling": "#7f8c8d",
    "default_tdp": "#444444",
    "sweet_spot": "#f1c40f",
    "near_peak": "#27ae60",
    "failed": "#7f7f7f",
}

_RC: dict[RcKeyType, str | float | bool] = {
    "font.family": "DejaVu Sans",
    "font.size": 9.0,
    "axes.titlesize": 9.0,
    "axes.labelsize": 9.0,
    "figure.titlesize": 11.5,
    "figure.titleweight": "bold",
    "xtick.labelsize": 8.0,
    "ytick.labelsize": 8.0,
    "legend.fontsize": 8.0,
    "legend.framealpha": 0.92,
    "legend.edgecolor": "#bbbbbb",
    "axes.grid": True,
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.6,
    "axes.axisbelow": True,
    "axes.spines.top": False,
    "lines.linewidth": 1.6,
    "lines.markersize": 3.5,
    "figure.facecolor": "white",
    "axes.facecolor": "white",
    "savefig.facecolor": "white",
    "path.simplify": False,
    "svg.hashsalt": "powersweep",
    "svg.id": "powersweep",
    "svg.fonttype": "path",
    "text.usetex": False,
    "axes.unicode_minus": True,
}


@contextmanager
def style() -> Iterator[None]:
    """Applies the fixed chart style for the duration of the block."""
    with matplotlib.rc_context(_RC):
        yield


def new_figure(height_in: float = FIG_HEIGHT_IN) -> Figure:
    """A white figure with an Agg canvas attached and constrained layout (call inside style())."""
    fig = Figure(figsize=(FIG_WIDTH_IN, height_in), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def freeze_layout(fig: Figure) -> None:
    """Runs the layout once and pins it, so that artists placed afterwards do not move the axes."""
    fig.draw_without_rendering()
    fig.set_layout_engine("none")


def check_formats(formats: Sequence[str]) -> tuple[str, ...]:
    """Normalises and validates output formats.

    Raises:
        UsageError: A format is not supported or none was given.
    """
    if isinstance(formats, str):
        formats = (formats,)
    out: list[str] = []
    for fmt in formats:
        norm = fmt.lower().lstrip(".")
        if norm not in SUPPORTED_FORMATS:
            raise UsageError(
                f"unsupported chart format {fmt!r}; use one of {', '.join(SUPPORTED_FORMATS)}"
            )
        if norm not in out:
            out.append(norm)
    if not out:
        raise UsageError("no chart format given; use png and/or svg")
    return tuple(out)


def make_folder(folder: Path) -> None:
    """Create a chart folder (and its parents).

    Raises:
        PowersweepError: It cannot be made (a file in the way, no permission); the message
            names it.
    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PowersweepError(
            f"cannot create chart folder {folder}: {exc.strerror or exc}"
        ) from exc


def save_figure(fig: Figure, stem: Path, formats: Sequence[str]) -> list[Path]:
    """Writes ``stem.<fmt>`` for each format, byte-identically for identical figures.

    Raises:
        PowersweepError: A file cannot be written.
    """
    paths: list[Path] = []
    for fmt in check_formats(formats):
        path = stem.parent / f"{stem.name}.{fmt}"
        # Timestamps and version strings are what make otherwise identical files differ.
        metadata: dict[str, str | None] = {"Software": None} if fmt == "png" else {"Date": None}
        if fmt == "svg":
            metadata["Creator"] = None
        # Drawn in memory and written whole (safe_files): a signal or a full disk mid-write
        # leaves the previous chart or none, and a link at its name is replaced, not followed.
        drawn = io.BytesIO()
        with style():
            fig.savefig(drawn, format=fmt, dpi=DPI, metadata=metadata)
        try:
            write_atomic(path, drawn.getvalue(), sync=False)
        except OSError as exc:
            raise PowersweepError(f"cannot write chart {path}: {exc.strerror or exc}") from exc
        paths.append(path)
    return paths


def write_charts(
    out_dir: Path, formats: Sequence[str], charts: Iterable[tuple[str, Callable[[], Figure]]]
) -> list[Path]:
    """Writes each chart (its file name without the format, how it is drawn) into ``out_dir``
    in each format, one figure drawn at a time.

    Raises:
        UsageError: A format is not supported, or a chart has nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    fmts = check_formats(formats)
    make_folder(out_dir)
    paths: list[Path] = []
    for stem, draw in charts:
        paths += save_figure(draw(), out_dir / stem, fmts)
    return paths
