"""TPS/W against inter-token latency p95: one point per cap (or clock point), the target drawn,
the pick starred. Drawn from the analysis dict alone (its ``latency_target`` and table rows)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from powersweep.errors import PowersweepError, UsageError
from powersweep.plots._style import COLORS, check_formats, new_figure, save_figure, style

LATENCY_STEM = "latency"
PICK_GID = "latency-pick"
TARGET_GID = "latency-target"


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _name(p: Mapping[str, Any]) -> str:
    if "sm_lock_mhz" in p or "mem_lock_mhz" in p:
        parts = [
            f"{what} {_f(p.get(k)):.0f}"
            for what, k in (("SM", "sm_lock_mhz"), ("mem", "mem_lock_mhz"))
            if math.isfinite(_f(p.get(k)))
        ]
        return " / ".join(parts) or "unlocked"
    return f"{_f(p.get('cap_w')):g} W"


def _points(analysis: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    rows = analysis.get("points") if analysis.get("kind") == "clocks" else analysis.get("caps")
    return [
        r
        for r in rows or []
        if r.get("status", "ok") == "ok"
        and math.isfinite(_f(r.get("itl_p95_ms")))
        and math.isfinite(_f(r.get("tps_per_w")))
    ]


def has_latency(analysis: Mapping[str, Any]) -> bool:
    """Whether any usable point has an inter-token p95 to plot."""
    return bool(_points(analysis))


def latency_figure(analysis: Mapping[str, Any], title: str | None = None) -> Figure:
    """TPS/W (y) against inter-token p95 (x), each point labelled, the pick starred.

    Raises:
        UsageError: No point has an inter-token p95 (a run older than the column, or
            prefill-heavy with one-token answers).
    """
    pts = _points(analysis)
    if not pts:
        raise UsageError(
            "nothing to plot: no point has an inter-token p95 (itl_p95_ms) in caps.csv"
        )
    target = analysis.get("latency_target") or {}
    pick = target.get("point") if target.get("met") else None
    run = analysis.get("run") or {}
    with style():
        fig = new_figure()
        ax = fig.add_subplot()
        xs = [_f(p["itl_p95_ms"]) for p in pts]
        ys = [_f(p["tps_per_w"]) for p in pts]
        ax.plot(
            xs, ys, linestyle="none", marker="o", color=COLORS["tps_per_w"], label="measured point"
        )
        for p, x, y in zip(pts, xs, ys, strict=True):
            ax.annotate(_name(p), (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
        limit = _f(target.get("max_itl_ms"))
        if math.isfinite(limit):
            ax.axvline(limit, color=COLORS["default_tdp"], linestyle="--", gid=TARGET_GID)
            ax.annotate(
                f"target {limit:g} ms",
                (limit, 1.0),
                xycoords=("data", "axes fraction"),
                textcoords="offset points",
                xytext=(3, -10),
                fontsize=7,
            )
        if isinstance(pick, Mapping) and math.isfinite(_f(pick.get("itl_p95_ms"))):
            ax.plot(
                [_f(pick["itl_p95_ms"])],
                [_f(pick["tps_per_w"])],
                marker="*",
                markersize=12,
                linestyle="none",
                color=COLORS["sweet_spot"],
                label=f"pick: {_name(pick)}",
                gid=PICK_GID,
            )
        ax.set_xlabel("inter-token latency p95 (ms)")
        ax.set_ylabel("TPS/W")
        head = title or run.get("gpu_name") or "GPU"
        mode = run.get("load_mode")
        ax.set_title(f"{head}: efficiency against latency" + (f" ({mode})" if mode else ""))
        ax.legend(loc="best")
    return fig


def render_latency_chart(
    analysis: Mapping[str, Any],
    out_dir: Path,
    *,
    formats: Sequence[str] = ("png",),
    title: str | None = None,
) -> list[Path]:
    """Write ``latency.<fmt>`` into ``out_dir``.

    Raises:
        UsageError: Bad format, or nothing to plot.
        PowersweepError: The folder or a file cannot be written.
    """
    fmts = check_formats(formats)
    fig = latency_figure(analysis, title)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise PowersweepError(
            f"cannot create chart folder {out_dir}: {exc.strerror or exc}"
        ) from exc
    return save_figure(fig, out_dir / LATENCY_STEM, fmts)
