"""Typed, null-tolerant views of the analysis dict (the analysis.json schema) for the charts.

The charts never see the raw dict: every key is optional here, a null or a missing number becomes
``NaN``, and a cap whose status is not ``ok`` has its TPS and TPS/W blanked so that the curve shows
a gap instead of a fake zero.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from powersweep.errors import UsageError

NAN = math.nan

FloatArray = npt.NDArray[np.float64]


def _num(value: object) -> float:
    """A float from a JSON value; NaN for null, booleans, strings and non-finite junk."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return NAN
    out = float(value)
    return out if math.isfinite(out) else NAN


def _str(value: object) -> str | None:
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class RunInfo:
    """Header facts of a run; None or NaN when unknown."""

    gpu_name: str | None
    n_gpus: int | None
    cooling: str | None
    load_mode: str | None
    model: str | None
    engine: str | None
    date: str | None
    default_limit_w: float
    min_limit_w: float
    max_limit_w: float
    gpu_label: str | None = None
    # each card's (name, default W) on a rig of different cards; empty otherwise
    card_defaults: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Curve:
    """The curve as arrays sorted by cap; failed caps carry NaN in every measured column."""

    cap_w: FloatArray
    tps: FloatArray
    code_tps: FloatArray
    power_w: FloatArray
    tps_per_w: FloatArray
    sm_clock_mhz: FloatArray
    mem_clock_mhz: FloatArray
    failed: npt.NDArray[np.bool_]


@dataclass(frozen=True)
class SweetSpot:
    """The cap with the best TPS/W."""

    cap_w: float
    tps_per_w: float
    tps: float
    power_w: float
    pct_of_default: float
    at_boundary: str | None
    # each card's own % of default on a rig of different cards; empty otherwise
    pct_of_default_by_gpu: tuple[float, ...] = ()


@dataclass(frozen=True)
class NearPeak:
    """The lowest cap that keeps TPS close to its peak."""

    cap_w: float
    tps_loss_pct: float
    tps_per_w: float


@dataclass(frozen=True)
class Plateau:
    """A span of caps where draw stops following the cap."""

    kind: str
    start_w: float
    end_w: float
    power_w: float


@dataclass(frozen=True)
class AnalysisView:
    """Everything a chart needs from one analysis dict."""

    metric: str
    run: RunInfo
    curve: Curve
    sweet_spot: SweetSpot | None
    near_peak: NearPeak | None
    plateaus: tuple[Plateau, ...]

    @property
    def is_prefill(self) -> bool:
        """True when TPS/W is computed from prefill TPS."""
        return self.metric == "prefill_tps"


def _run_info(raw: Mapping[str, Any]) -> RunInfo:
    n_gpus = raw.get("n_gpus")
    return RunInfo(
        gpu_name=_str(raw.get("gpu_name")),
        n_gpus=n_gpus if isinstance(n_gpus, int) and not isinstance(n_gpus, bool) else None,
        cooling=_str(raw.get("cooling")),
        load_mode=_str(raw.get("load_mode")),
        model=_str(raw.get("model")),
        engine=_str(raw.get("engine")),
        date=_str(raw.get("date")),
        default_limit_w=_num(raw.get("default_limit_w")),
        min_limit_w=_num(raw.get("min_limit_w")),
        max_limit_w=_num(raw.get("max_limit_w")),
        gpu_label=_str(raw.get("gpu_label")),
        card_defaults=_card_defaults(raw),
    )


def _card_defaults(raw: Mapping[str, Any]) -> tuple[tuple[str, float], ...]:
    """Distinct (card, default W) pairs of a rig of different cards (its mean default is no
    card's own)."""
    defaults, names = raw.get("default_limits_w"), raw.get("gpu_names")
    if not isinstance(defaults, list) or not isinstance(names, list):
        return ()
    if len(defaults) != len(names):
        return ()
    pairs = [(str(n), _num(d)) for n, d in zip(names, defaults, strict=True)]
    return tuple(dict.fromkeys((n, d) for n, d in pairs if math.isfinite(d)))


def _curve(raw_caps: object) -> Curve:
    if not isinstance(raw_caps, Sequence) or isinstance(raw_caps, str):
        raise UsageError("analysis has no 'caps' list to plot; re-run `powersweep analyze`")
    rows = [_mapping(c) for c in raw_caps]
    rows = [r for r in rows if math.isfinite(_num(r.get("cap_w")))]
    if not rows:
        raise UsageError("analysis has no caps to plot (the sweep finished no cap)")
    rows.sort(key=lambda r: _num(r.get("cap_w")))

    def column(key: str) -> FloatArray:
        return np.array([_num(r.get(key)) for r in rows], dtype=np.float64)

    # A missing status means a bare caps.csv, whose rows are all measurements.
    failed = np.array([str(r.get("status") or "ok") != "ok" for r in rows], dtype=np.bool_)
    tps = column("tps")
    power_w = column("power_w")
    tps_per_w = column("tps_per_w")
    derived = np.divide(tps, power_w, out=np.full_like(tps, NAN), where=power_w > 0)
    tps_per_w = np.where(np.isnan(tps_per_w), derived, tps_per_w)
    measured = [tps, column("code_tps"), power_w, tps_per_w]
    measured += [column("sm_clock_mhz"), column("mem_clock_mhz")]
    for arr in measured:
        arr[failed] = NAN
    return Curve(
        cap_w=column("cap_w"),
        tps=measured[0],
        code_tps=measured[1],
        power_w=measured[2],
        tps_per_w=measured[3],
        sm_clock_mhz=measured[4],
        mem_clock_mhz=measured[5],
        failed=failed,
    )


def _sweet_spot(raw: object) -> SweetSpot | None:
    m = _mapping(raw)
    cap_w, tps_per_w = _num(m.get("cap_w")), _num(m.get("tps_per_w"))
    if not (math.isfinite(cap_w) and math.isfinite(tps_per_w)):
        return None
    boundary = m.get("at_boundary")
    return SweetSpot(
        cap_w=cap_w,
        tps_per_w=tps_per_w,
        tps=_num(m.get("tps")),
        power_w=_num(m.get("power_w")),
        pct_of_default=_num(m.get("pct_of_default")),
        at_boundary=boundary if boundary in ("low", "high") else None,
        pct_of_default_by_gpu=tuple(
            _num(v) for v in m.get("pct_of_default_by_gpu") or () if math.isfinite(_num(v))
        ),
    )


def _near_peak(raw: object) -> NearPeak | None:
    m = _mapping(raw)
    cap_w, tps_per_w = _num(m.get("cap_w")), _num(m.get("tps_per_w"))
    if not (math.isfinite(cap_w) and math.isfinite(tps_per_w)):
        return None
    return NearPeak(cap_w=cap_w, tps_loss_pct=_num(m.get("tps_loss_pct")), tps_per_w=tps_per_w)


def _plateaus(raw: object) -> tuple[Plateau, ...]:
    if not isinstance(raw, Sequence) or isinstance(raw, str):
        return ()
    out = []
    for item in raw:
        m = _mapping(item)
        start_w, end_w = _num(m.get("start_w")), _num(m.get("end_w"))
        kind = m.get("kind")
        if kind not in ("boost_plateau", "draw_ceiling"):
            continue
        if not (math.isfinite(start_w) and math.isfinite(end_w)):
            continue
        lo, hi = sorted((start_w, end_w))
        out.append(Plateau(kind=str(kind), start_w=lo, end_w=hi, power_w=_num(m.get("power_w"))))
    return tuple(sorted(out, key=lambda p: p.start_w))


def parse_analysis(analysis: Mapping[str, Any]) -> AnalysisView:
    """Reads the parts of an analysis dict the charts use.

    Args:
        analysis: A dict following the analysis.json schema (docs/run-format.md). Unknown keys are
            ignored; nulls and missing keys are tolerated.

    Returns:
        The typed view.

    Raises:
        UsageError: The dict is not a mapping or has no cap to plot.
    """
    if not isinstance(analysis, Mapping):
        raise UsageError("analysis must be a JSON object (the contents of analysis.json)")
    metric = analysis.get("metric")
    return AnalysisView(
        metric=metric if metric in ("narr_tps", "prefill_tps") else "narr_tps",
        run=_run_info(_mapping(analysis.get("run"))),
        curve=_curve(analysis.get("caps")),
        sweet_spot=_sweet_spot(analysis.get("sweet_spot")),
        near_peak=_near_peak(analysis.get("near_peak")),
        plateaus=_plateaus(analysis.get("plateaus")),
    )


def gpu_label(run: RunInfo) -> str:
    """``2x NVIDIA GeForce RTX 3090`` style name (``A + B`` for different cards), or ``GPU``."""
    if run.gpu_label and " + " in run.gpu_label:
        return run.gpu_label
    name = run.gpu_name or "GPU"
    return f"{run.n_gpus}x {name}" if run.n_gpus and run.n_gpus > 1 else name


def subtitle(run: RunInfo, *, with_gpu: bool = True) -> str:
    """One line of run facts: GPU, cooling, engine/model, load mode, date (unknown parts left out).

    Args:
        run: The run header.
        with_gpu: Start with the GPU name (leave it out when the title already says it).
    """
    parts: list[str] = [gpu_label(run)] if with_gpu else []
    if run.cooling and run.cooling != "unspecified":
        parts.append(f"{run.cooling}-cooled")
    served = " / ".join(p for p in (run.engine, run.model) if p)
    if served:
        parts.append(served)
    if run.load_mode:
        parts.append(run.load_mode)
    if run.date:
        parts.append(run.date)
    return "  ·  ".join(parts)


def fmt_w(value: float) -> str:
    """Watts without a pointless ``.0``."""
    return f"{value:.0f} W" if float(value).is_integer() else f"{value:.1f} W"
