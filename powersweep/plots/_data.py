"""What the charts draw of a typed power analysis: its curve as arrays, NaN for an unknown number.

The reasoning: docs/figures.md, "powersweep.plots._data".
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from powersweep.analysis.result_types import CapRow, Pick, Plateau, PowerAnalysis, RunFacts, known
from powersweep.errors import UsageError
from powersweep.runformat import as_float

NAN = math.nan
PLATEAU_KINDS = ("boost_plateau", "draw_ceiling")
# Readings the analysis set aside (physics forbids them): drawn apart, never joined to the curve.
SET_ASIDE = ("outlier", "implausible")

FloatArray = npt.NDArray[np.float64]


def text(value: str | None) -> str | None:
    """The text stripped, or None where it is unknown or blank."""
    stripped = (value or "").strip()
    return stripped or None


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
    set_aside_tps_per_w: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))
    set_aside_cap_w: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))
    # each cap's stated 95% half-widths, % (NaN: not stated), as the analysis gives them
    tps_u95_pct: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))
    tps_per_w_u95_pct: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))
    power_u95_pct: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))
    set_aside_tps_per_w_u95_pct: FloatArray = dataclasses.field(default_factory=lambda: np.empty(0))

    def half_width(self, values: FloatArray, u95_pct: FloatArray) -> FloatArray:
        """A stated half-width in the figure's own units (NaN where none is stated)."""
        if len(u95_pct) != len(values):
            return np.full(len(values), NAN)
        return np.abs(values) * u95_pct / 100.0


@dataclass(frozen=True)
class AnalysisView:
    """Everything a chart draws of one power analysis.

    Attributes:
        analysis: The typed analysis.
        curve: Its caps as arrays.
        sweet_spot: The sweet spot, where its cap and TPS/W are known (else None).
        near_peak: The near-peak cap, where its cap and TPS/W are known (else None).
        plateaus: The plateaus of a known kind with both ends known, ends ordered, by start.
    """

    analysis: PowerAnalysis
    curve: Curve
    sweet_spot: Pick | None
    near_peak: Pick | None
    plateaus: tuple[Plateau, ...]

    @property
    def run(self) -> RunFacts:
        """The run's facts."""
        return self.analysis.run

    @property
    def metric(self) -> str:
        """``prefill_tps`` or ``narr_tps`` (any other metric reads as narrative TPS)."""
        return "prefill_tps" if self.analysis.metric == "prefill_tps" else "narr_tps"

    @property
    def is_prefill(self) -> bool:
        """True when TPS/W is computed from prefill TPS."""
        return self.metric == "prefill_tps"

    @property
    def answer_kind(self) -> str:
        """``answer``, ``boundary`` or ``none`` (an analysis older than the record: answer)."""
        answer = known(self.analysis.answer)
        return answer.kind if answer is not None else "answer"


def card_defaults(run: RunFacts) -> tuple[tuple[str, float], ...]:
    """Distinct (card, default W) pairs of a rig of different cards (its mean default is no
    card's own); empty otherwise."""
    defaults, names = run.default_limits_w, run.gpu_names
    if defaults is None or names is None or len(defaults) != len(names):
        return ()
    pairs = [(str(n), as_float(d)) for n, d in zip(names, defaults, strict=True)]
    return tuple(dict.fromkeys((n, d) for n, d in pairs if math.isfinite(d)))


def pct_by_gpu(pick: Pick) -> tuple[float, ...]:
    """Each card's own % of its default on a rig of different cards (the known ones); empty
    otherwise."""
    shares = [as_float(v) for v in known(pick.pct_of_default_by_gpu) or ()]
    return tuple(v for v in shares if math.isfinite(v))


def _column(rows: Sequence[CapRow], get: Callable[[CapRow], float | None]) -> FloatArray:
    return np.array([as_float(get(r)) for r in rows], dtype=np.float64)


def _tpw_u95(spot: Pick | None) -> Callable[[CapRow], float | None]:
    """A row's stated TPS/W half-width: its own, else the sweet spot's map of each cap's (an
    analysis written before the rows carried it)."""
    by_cap = (known(spot.tps_per_w_u95_pct) if spot is not None else None) or {}

    def get(row: CapRow) -> float | None:
        own = known(row.figures.tps_per_w_u95_pct)
        return own if own is not None else by_cap.get(str(float(row.cap_w)))

    return get


def _curve(caps: Sequence[CapRow], spot: Pick | None = None) -> Curve:
    every = sorted((c for c in caps if math.isfinite(c.cap_w)), key=lambda c: c.cap_w)
    aside_rows = [r for r in every if (r.figures.status or "ok") in SET_ASIDE]
    aside_tpw = _column(aside_rows, lambda r: r.figures.tps_per_w)
    tpw_u95 = _tpw_u95(spot)
    known_aside = np.isfinite(aside_tpw)
    # a reading set aside is drawn apart: the curve joins its neighbours over it, no gap
    rows = [
        r
        for r in every
        if (r.figures.status or "ok") not in SET_ASIDE
        or not math.isfinite(as_float(r.figures.tps_per_w))
    ]
    if not rows:
        raise UsageError("analysis has no caps to plot (the sweep finished no cap)")
    # A missing status means a bare caps.csv, whose rows are all measurements.
    failed = np.array([(r.figures.status or "ok") != "ok" for r in rows], dtype=np.bool_)
    tps = _column(rows, lambda r: r.figures.tps)
    power_w = _column(rows, lambda r: r.figures.power_w)
    tps_per_w = _column(rows, lambda r: r.figures.tps_per_w)
    derived = np.divide(tps, power_w, out=np.full_like(tps, NAN), where=power_w > 0)
    tps_per_w = np.where(np.isnan(tps_per_w), derived, tps_per_w)
    measured = [tps, _column(rows, lambda r: known(r.figures.code_tps)), power_w, tps_per_w]
    measured += [_column(rows, lambda r: r.figures.sm_clock_mhz)]
    measured += [_column(rows, lambda r: r.figures.mem_clock_mhz)]
    measured += [_column(rows, lambda r: known(r.figures.tps_u95_pct)), _column(rows, tpw_u95)]
    measured += [_column(rows, lambda r: known(r.figures.power_u95_pct))]
    for arr in measured:
        arr[failed] = NAN
    return Curve(
        cap_w=_column(rows, lambda r: r.cap_w),
        tps=measured[0],
        code_tps=measured[1],
        power_w=measured[2],
        tps_per_w=measured[3],
        sm_clock_mhz=measured[4],
        mem_clock_mhz=measured[5],
        failed=failed,
        set_aside_tps_per_w=aside_tpw[known_aside],
        set_aside_cap_w=_column(aside_rows, lambda r: r.cap_w)[known_aside],
        tps_u95_pct=measured[6],
        tps_per_w_u95_pct=measured[7],
        power_u95_pct=measured[8],
        set_aside_tps_per_w_u95_pct=_column(aside_rows, tpw_u95)[known_aside],
    )


def _marked(pick: Pick | None) -> Pick | None:
    """The pick where a chart can mark it (its cap and TPS/W known)."""
    if pick is None or not (math.isfinite(pick.cap_w) and math.isfinite(as_float(pick.tps_per_w))):
        return None
    return pick


def _plateaus(plateaus: Sequence[Plateau]) -> tuple[Plateau, ...]:
    out = []
    for p in plateaus:
        if p.kind not in PLATEAU_KINDS:
            continue
        if not (math.isfinite(p.start_w) and math.isfinite(p.end_w)):
            continue
        lo, hi = sorted((p.start_w, p.end_w))
        out.append(dataclasses.replace(p, start_w=lo, end_w=hi))
    return tuple(sorted(out, key=lambda p: p.start_w))


def parse_analysis(analysis: PowerAnalysis) -> AnalysisView:
    """The parts of a power analysis the charts draw.

    Args:
        analysis: The typed analysis (``PowerAnalysis.from_json`` of analysis.json).

    Returns:
        The view: the curve as arrays, the marks that can be placed.

    Raises:
        UsageError: The analysis has no cap to plot.
    """
    return AnalysisView(
        analysis=analysis,
        curve=_curve(analysis.caps, analysis.sweet_spot),
        sweet_spot=_marked(analysis.sweet_spot),
        near_peak=_marked(analysis.near_peak),
        plateaus=_plateaus(analysis.plateaus),
    )


def gpu_label(run: RunFacts) -> str:
    """``2x NVIDIA GeForce RTX 3090`` style name (``A + B`` for different cards), or ``GPU``."""
    label = text(run.gpu_label)
    if label and " + " in label:
        return label
    name = text(run.gpu_name) or "GPU"
    return f"{run.n_gpus}x {name}" if run.n_gpus and run.n_gpus > 1 else name


def subtitle(run: RunFacts, *, with_gpu: bool = True) -> str:
    """One line of run facts: GPU, cooling, engine/model, load mode, date (unknown parts left out).

    Args:
        run: The run's facts.
        with_gpu: Start with the GPU name (leave it out when the title already says it).
    """
    parts: list[str] = [gpu_label(run)] if with_gpu else []
    cooling = text(run.cooling)
    if cooling and cooling != "unspecified":
        parts.append(f"{cooling}-cooled")
    served = " / ".join(p for p in (text(run.engine), text(run.model)) if p)
    if served:
        parts.append(served)
    load_mode = text(run.load_mode)
    if load_mode:
        parts.append(load_mode)
    date = text(run.date)
    if date:
        parts.append(date)
    return "  ·  ".join(parts)


def fmt_w(value: float) -> str:
    """Watts without a pointless ``.0``."""
    return f"{value:.0f} W" if float(value).is_integer() else f"{value:.1f} W"
