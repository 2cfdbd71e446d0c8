"""A fleet of runs: one answer per GPU model, load mode, served model and axis, and the cards
that do not fit it.

The reasoning: docs/fleets.md, "powersweep.analysis.fleet_answer".
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from msgspec import UNSET

from powersweep import __version__
from powersweep.analysis import serving
from powersweep.analysis.fleet_axis import AXES, POWER, FleetAxis
from powersweep.analysis.fleet_cards import (
    SAME,
    CardCurve,
    card_of,
    common_root,
    discover_runs,
    unique_labels,
    unreadable,
)
from powersweep.analysis.fleet_grid import Grid, fleet_setting, group_grid, within_noise
from powersweep.analysis.fleet_load import load_curves
from powersweep.analysis.fleet_outliers import THROTTLE_PCT, find_outliers
from powersweep.analysis.fleet_result_types import (
    AxisInfo,
    Band,
    Cause,
    Dist,
    Envelope,
    FleetAnswer,
    FleetCard,
    FleetGroup,
    FleetReport,
    GpuRef,
    GpuShare,
    Incomplete,
    Outlier,
    OutlierCurve,
    ReportOptions,
    Savings,
    Setting,
    Totals,
    Unreadable,
    VersusPower,
    WithinNoise,
)
from powersweep.analysis.load import Curve
from powersweep.analysis.result_types import Num, ToolInfo, known
from powersweep.analysis.undervolt import is_undervolt_curve
from powersweep.errors import UsageError
from powersweep.runformat import as_float

__all__ = ["FleetOptions", "check_options", "discover_runs", "fleet_report", "summarise"]

NAN = math.nan
HOURS_PER_YEAR = 8760.0


@dataclass(frozen=True)
class FleetOptions:
    """What a fleet report is asked.

    Attributes:
        tariff_per_kwh: Price of a kWh for the cost per 1M tokens (None: no cost lines).
        duty: Share of the year the cards serve at the measured load (savings scale with it).
        max_tps_loss_pct: TPS loss the per-card near-peak setting may cost.
        reanalyze: Analyse every caps.csv even where a fresh analysis.json is there.
    """

    tariff_per_kwh: float | None = None
    duty: float = 1.0
    max_tps_loss_pct: float = 5.0
    reanalyze: bool = False


def check_options(opts: FleetOptions) -> None:
    """Every number of a fleet report finite and in range (``--tariff inf`` prices nothing).

    Raises:
        UsageError: One line naming the option and its range.
    """
    serving.check_options(opts.tariff_per_kwh, None, None)
    if not (math.isfinite(opts.duty) and 0.0 < opts.duty <= 1.0):
        raise UsageError(f"--duty must be more than 0 and at most 1, not {opts.duty:g}")
    if not (math.isfinite(opts.max_tps_loss_pct) and 0.0 <= opts.max_tps_loss_pct < 100.0):
        raise UsageError(
            f"--max-tps-loss must be between 0 and 100 %, not {opts.max_tps_loss_pct:g}"
        )


def fleet_report(paths: Sequence[Path], options: FleetOptions | None = None) -> FleetReport:
    """Load, analyse and summarise every run under ``paths``.

    Args:
        paths: Run directories or folders holding them (searched recursively).
        options: Tariff, duty and near-peak tolerance.

    Returns:
        The fleet report (``fleet.json`` is its ``to_json()``), NaN as None.

    Raises:
        UsageError: A path holds no run, an option is out of range, or no run could be read.
    """
    opts = options or FleetOptions()
    check_options(opts)
    run_dirs = discover_runs(paths)
    curves, failed = load_curves(run_dirs)
    if not curves:
        detail = f": {failed[0][1]}" if failed else ""
        raise UsageError(f"no run could be read ({len(failed)} failed){detail}")
    return summarise(curves, failed, opts)


def summarise(
    curves: Sequence[Curve], failed: Sequence[tuple[Path, str]], opts: FleetOptions
) -> FleetReport:
    """The fleet report of loaded curves (see :func:`fleet_report`)."""
    root = common_root([c.source for c in curves])
    cards: list[CardCurve] = []
    unusable: list[Unreadable] = [unreadable(p, e) for p, e in failed]
    for curve in curves:
        if is_undervolt_curve(curve):
            # one offset search per card set, with its own answer: not a curve to pool
            why = "an undervolt search: not pooled across a fleet (see its own summary.md)"
            unusable.append(unreadable(curve.source, why))
            continue
        card = card_of(curve, root, opts.max_tps_loss_pct, opts.reanalyze)
        if card is None:
            unusable.append(unreadable(curve.source, "no usable cap or clock point"))
        else:
            cards.append(card)
    cards = unique_labels(cards, root)
    groups: dict[tuple[str, int, str, str, str], list[CardCurve]] = {}
    for card in cards:
        groups.setdefault(card.key, []).append(card)
    # power first, then the clock axes of the same cards beside it
    order = sorted(groups, key=lambda k: (k[:4], k[4] != POWER, k[4]))
    out_groups = _beside_power([_group(groups[k], opts) for k in order])
    counted = _counted_once(out_groups)
    incomplete = [
        Incomplete(label=c.label, run_dir=c.run_dir, status=c.status, error=c.error)
        for c in cards
        if c.status not in ("complete", "unknown")
    ]
    return FleetReport(
        tool=ToolInfo("powersweep", __version__),
        n_runs=len(cards) + len(unusable),
        n_cards=len(cards),
        options=ReportOptions(
            tariff_per_kwh=opts.tariff_per_kwh,
            duty=opts.duty,
            max_tps_loss_pct=opts.max_tps_loss_pct,
        ),
        unreadable=unusable,
        incomplete=incomplete,
        groups=out_groups,
        # cards swept on several axes count once (see _counted_once)
        totals=Totals(
            kw_saved=float(sum(as_float(_saved(g).kw_saved, 0.0) for g in counted)),
            mwh_per_year_saved=float(
                sum(as_float(_saved(g).mwh_per_year_saved, 0.0) for g in counted)
            ),
        ),
    )


def _saved(group: FleetGroup) -> Savings:
    return group.savings or Savings()


def _dist(values: Sequence[float]) -> Dist:
    v = np.array([x for x in values if math.isfinite(x)], dtype=float)
    if not len(v):
        return Dist(n=0, median=None, q1=None, q3=None, min=None, max=None)
    q1, med, q3 = np.percentile(v, [25, 50, 75])
    return Dist(
        n=len(v),
        median=float(med),
        q1=float(q1),
        q3=float(q3),
        min=float(v.min()),
        max=float(v.max()),
    )


def _nums(values: Iterable[float]) -> list[Num]:
    """Numbers as fleet.json writes them (null where not finite)."""
    return [as_float(v, None) for v in values]


def _matrix(cards: Sequence[CardCurve], grid: Grid) -> tuple[np.ndarray, ...]:
    """(TPS, draw, temperature, thermal-throttle %) of each card at each grid setting (NaN
    outside the card's measured range, and in a tier it did not measure)."""
    shape = (len(cards), len(grid))
    tps, power, temp, thr = (np.full(shape, NAN) for _ in range(4))
    for i, c in enumerate(cards):
        for tier in {float(t) if math.isfinite(t) else NAN for t in c.tier}:
            own = c._in_tier(tier)
            xs = c.x[own]
            inside = grid.in_tier(tier) & (grid.x >= xs[0] - SAME) & (grid.x <= xs[-1] + SAME)
            g = grid.x[inside]
            tps[i, inside] = np.interp(g, xs, c.tps[own])
            power[i, inside] = np.interp(g, xs, c.power_w[own])
            t_own = c.temp_c[own]
            if np.isfinite(t_own).any():
                ok = np.isfinite(t_own)
                temp[i, inside] = np.interp(g, xs[ok], t_own[ok])
            # throttling is a per-setting fact: the nearest measured setting's
            near = np.abs(xs[None, :] - g[:, None]).argmin(axis=1)
            thr[i, inside] = c.thermal_pct[own][near]
    return tps, power, temp, thr


def _band(values: np.ndarray, grid: Grid, axis: FleetAxis, tier: float) -> Band:
    """Median, IQR and min-max over cards at each setting of one tier (settings no card
    measured are left out)."""
    keep = grid.in_tier(tier) & (np.isfinite(values).sum(axis=0) >= 1)
    v = values[:, keep]
    with np.errstate(all="ignore"):
        q = np.nanpercentile(v, [0, 25, 50, 75, 100], axis=0) if v.size else np.empty((5, 0))
    xs = _nums(grid.x[keep].tolist())
    return Band(
        cap_w=xs if axis.setting_key == "cap_w" else UNSET,
        sm_lock_mhz=xs if axis.setting_key == "sm_lock_mhz" else UNSET,
        mem_lock_mhz=xs if axis.setting_key == "mem_lock_mhz" else UNSET,
        tier=as_float(tier, None),
        min=_nums(q[0].tolist()),
        q1=_nums(q[1].tolist()),
        median=_nums(q[2].tolist()),
        q3=_nums(q[3].tolist()),
        max=_nums(q[4].tolist()),
        n=[int(n) for n in np.isfinite(v).sum(axis=0).tolist()],
    )


def _group(cards: list[CardCurve], opts: FleetOptions) -> FleetGroup:
    gpu_name, n_gpus, load_mode, model, axis_name = cards[0].key
    axis = AXES[axis_name]
    grid = group_grid(cards)
    tps, power, temp, thr = _matrix(cards, grid)
    with np.errstate(all="ignore"):
        tpw = tps / power
    envelope = Counter(c.envelope_w for c in cards).most_common(1)[0][0]
    outliers = find_outliers(
        [c.label for c in cards],
        [c.envelope_w for c in cards],
        [_throttle_from(c) for c in cards],
        grid.x,
        tps,
        power,
        temp,
        thr,
        unit=axis.unit,
    )
    inlier = np.array([c.label not in outliers for c in cards])
    pick = fleet_setting(cards, grid, tps[inlier], power[inlier], inlier)
    fleet = (float(grid.x[pick]), float(grid.tier[pick]))
    steps = np.diff(grid.x[grid.in_tier(fleet[1])])
    per_card = [_versus_own(c, fleet) for c in cards]
    band_cards = tpw[inlier] if inlier.any() else tpw
    watts = axis.suffix == "w"
    step = as_float(float(np.median(steps)) if len(steps) else NAN, None)
    sweet, near = _dist([c.best[0] for c in cards]), _dist([c.near_peak[0] for c in cards])
    noise = within_noise(grid, tps[inlier], power[inlier], pick)
    answer = _answer(cards, inlier, axis, fleet, envelope, per_card, noise)
    return FleetGroup(
        gpu_name=gpu_name,
        n_gpus=n_gpus,
        load_mode=load_mode,
        model=model,
        axis=AxisInfo.of(axis),
        metric=cards[0].metric,
        n_cards=len(cards),
        envelope_w=Envelope(*(as_float(v, None) for v in envelope)),
        step_w=step if watts else UNSET,
        step_mhz=UNSET if watts else step,
        sweet_spot_w=sweet if watts else UNSET,
        sweet_spot_mhz=UNSET if watts else sweet,
        near_peak_w=near if watts else UNSET,
        near_peak_mhz=UNSET if watts else near,
        sweet_spot_tier_mhz=_dist([c.best[1] for c in cards]) if axis.tier_key else UNSET,
        fleet_cap=answer if axis.answer_key == "fleet_cap" else UNSET,
        fleet_lock=answer if axis.answer_key == "fleet_lock" else UNSET,
        savings=_savings(cards, fleet, opts, axis.reference),
        band=_band(band_cards, grid, axis, fleet[1]),
        outliers=[_outlier(c, outliers[c.label], axis) for c in cards if c.label in outliers],
        cards=[
            _card(c, axis, c.label in outliers, p) for c, p in zip(cards, per_card, strict=True)
        ],
    )


def _card(card: CardCurve, axis: FleetAxis, outlier: bool, versus: VersusOwn) -> FleetCard:
    """One card of a group: its own best and near-peak, and what the group's answer does to
    it (``*_at_fleet_cap`` or ``*_at_fleet_lock``)."""
    watts, cap = axis.suffix == "w", axis.answer_key == "fleet_cap"
    best, near = as_float(card.best[0], None), as_float(card.near_peak[0], None)
    return FleetCard(
        label=card.label,
        run_dir=card.run_dir,
        status=card.status,
        host=card.host,
        gpus=_gpus(card),
        sweet_spot_w=best if watts else UNSET,
        sweet_spot_mhz=UNSET if watts else best,
        near_peak_w=near if watts else UNSET,
        near_peak_mhz=UNSET if watts else near,
        own_best=_setting(axis, card.best),
        outlier=outlier,
        cap_at_fleet_cap_w=versus.runs_at if cap and watts else UNSET,
        lock_at_fleet_lock_mhz=versus.runs_at if not cap and not watts else UNSET,
        tps_at_fleet_cap=versus.tps if cap else UNSET,
        tps_at_fleet_lock=UNSET if cap else versus.tps,
        tps_per_w_at_fleet_cap=versus.tps_per_w if cap else UNSET,
        tps_per_w_at_fleet_lock=UNSET if cap else versus.tps_per_w,
        tps_per_w_vs_own_best_pct=versus.tps_per_w_vs_own_best_pct,
        tps_vs_own_best_pct=versus.tps_vs_own_best_pct,
    )


def _gpus(card: CardCurve) -> list[GpuRef]:
    return [GpuRef(uuid=u, name=n) for u, n in card.gpus]


def _setting(axis: FleetAxis, setting: tuple[float, float]) -> Setting:
    """``{"cap_w": 280}`` or ``{"sm_lock_mhz": 1425}`` (a grid: with ``mem_lock_mhz``)."""
    values: dict[str, Num] = {axis.setting_key: as_float(setting[0], None)}
    if axis.tier_key:
        values[axis.tier_key] = as_float(setting[1], None)
    return Setting(
        cap_w=values.get("cap_w", UNSET),
        sm_lock_mhz=values.get("sm_lock_mhz", UNSET),
        mem_lock_mhz=values.get("mem_lock_mhz", UNSET),
    )


def _answer(
    cards: Sequence[CardCurve],
    inlier: np.ndarray,
    axis: FleetAxis,
    fleet: tuple[float, float],
    envelope: tuple[float, float, float],
    per_card: Sequence[VersusOwn],
    noise: WithinNoise,
) -> FleetAnswer:
    """The group's fleet cap (or lock): the setting, its noise, what it costs or gains."""
    default_w = envelope[1]
    by_gpu = Counter(c.defaults_w for c in cards).most_common(1)[0][0]
    setting = _setting(axis, fleet)
    out = FleetAnswer(
        cap_w=setting.cap_w,
        sm_lock_mhz=setting.sm_lock_mhz,
        mem_lock_mhz=setting.mem_lock_mhz,
        within_noise=noise,
        fleet_tps_per_w=as_float(_pooled(cards, inlier, lambda c: fleet), None),
        tps_per_card=as_float(_pooled(cards, inlier, lambda c: fleet, per_card=True), None),
        fleet_tps_per_w_at_reference=as_float(_pooled(cards, inlier, lambda c: c.reference), None),
        tps_per_w_vs_own_best_pct=_dist([as_float(p.tps_per_w_vs_own_best_pct) for p in per_card]),
        tps_vs_own_best_pct=_dist([as_float(p.tps_vs_own_best_pct) for p in per_card]),
        excluded_outliers=int((~inlier).sum()),
    )
    if axis.is_clock:
        held = Counter(c.held_cap_w for c in cards).most_common(1)[0][0]
        return replace(out, held_cap_w=as_float(held, None))
    cap_w = fleet[0]
    shares = [
        GpuShare(
            gpu_name=n,
            default_w=as_float(d, None),
            pct_of_default=as_float(cap_w / d * 100.0, None),
        )
        for n, d in by_gpu
        if d > 0
    ]
    return replace(
        out,
        # a rig of different cards has no one default: the cap is a share of each card's
        pct_of_default=(
            as_float(cap_w / default_w * 100.0, None) if default_w > 0 and not by_gpu else None
        ),
        pct_of_default_by_gpu=shares or None,
        fleet_tps_per_w_at_default=as_float(
            _pooled(cards, inlier, lambda c: (default_w, NAN)), None
        ),
    )


def _outlier(card: CardCurve, causes: Sequence[Mapping[str, str]], axis: FleetAxis) -> Outlier:
    """An outlier: its causes, and its own best, which ``fleet apply`` sets on it instead of
    the fleet's answer (the answer was chosen without it, so says nothing about it)."""
    with np.errstate(all="ignore"):
        tpw = card.tps / card.power_w
    in_tier = card._in_tier(card.best[1])
    watts = axis.suffix == "w"
    best = as_float(card.best[0], None)
    xs = _nums(card.x[in_tier].tolist())
    return Outlier(
        label=card.label,
        run_dir=card.run_dir,
        host=card.host,
        gpus=_gpus(card),
        causes=[Cause(code=c.get("code"), message=c.get("message")) for c in causes],
        sweet_spot_w=best if watts else UNSET,
        sweet_spot_mhz=UNSET if watts else best,
        own_best=_setting(axis, card.best),
        apply="own_best",
        curve=OutlierCurve(
            cap_w=xs if axis.setting_key == "cap_w" else UNSET,
            sm_lock_mhz=xs if axis.setting_key == "sm_lock_mhz" else UNSET,
            mem_lock_mhz=xs if axis.setting_key == "mem_lock_mhz" else UNSET,
            tps_per_w=_nums(tpw[in_tier].tolist()),
        ),
    )


def _pooled(
    cards: Sequence[CardCurve],
    use: np.ndarray,
    setting: Callable[[CardCurve], tuple[float, float]],
    per_card: bool = False,
) -> float:
    """Fleet TPS/W at a setting (``setting(card)`` gives each card's): all the group's tokens
    over all its watts, each card at the setting it can run; ``per_card``: TPS per card."""
    tps = power = 0.0
    n = 0
    for c, u in zip(cards, use, strict=True):
        x, tier = setting(c)
        if not u or not math.isfinite(x):
            continue
        t, p = c.at(c.clamped(x, tier), tier)
        if math.isfinite(t) and math.isfinite(p):
            tps, power, n = tps + t, power + p, n + 1
    if per_card:
        return tps / n if n else NAN
    return tps / power if power > 0 else NAN


@dataclass(frozen=True)
class VersusOwn:
    """What the fleet's answer does to one card: the setting it runs at (clamped to what it
    measured), its TPS and TPS/W there, and against its own best, %."""

    runs_at: Num
    tps: Num
    tps_per_w: Num
    tps_per_w_vs_own_best_pct: Num
    tps_vs_own_best_pct: Num


def _versus_own(card: CardCurve, fleet: tuple[float, float]) -> VersusOwn:
    """What the fleet's answer costs or gains this card against its own best."""
    x = card.clamped(*fleet)
    t, p = card.at(x, fleet[1])
    t0, p0 = card.at(*card.best)
    return VersusOwn(
        runs_at=as_float(x, None),
        tps=as_float(t, None),
        tps_per_w=as_float(t / p, None),
        tps_per_w_vs_own_best_pct=as_float(((t / p) / (t0 / p0) - 1.0) * 100.0, None),
        tps_vs_own_best_pct=as_float((t / t0 - 1.0) * 100.0, None),
    )


def _savings(
    cards: Sequence[CardCurve], fleet: tuple[float, float], opts: FleetOptions, reference: str
) -> Savings:
    """Every card of the group at the fleet's answer against its reference (the default limit,
    or the highest lock it measured), at measured TPS.

    A card whose sweep did not measure its reference (an unknown default, or ``--caps`` that
    stop short of it) cannot be priced and is counted in ``n_cards_unpriced``.
    """
    p_def = p_cap = t_def = t_cap = 0.0
    n = unpriced = 0
    for c in cards:
        ref = c.reference
        td, pd = c.at(*ref) if math.isfinite(ref[0]) else (NAN, NAN)
        tc, pc = c.at(c.clamped(*fleet), fleet[1])
        if not all(math.isfinite(v) for v in (td, pd, tc, pc)):
            unpriced += 1
            continue
        n += 1
        p_def, p_cap, t_def, t_cap = p_def + pd, p_cap + pc, t_def + td, t_cap + tc
    if n == 0:
        return Savings(n_cards=0, n_cards_unpriced=unpriced, reference=reference)
    kw = (p_def - p_cap) / 1000.0
    kwh_mtok_def = p_def / t_def * 1e6 / 3.6e6
    kwh_mtok_cap = p_cap / t_cap * 1e6 / 3.6e6
    tariff = opts.tariff_per_kwh
    return Savings(
        n_cards=n,
        n_cards_unpriced=unpriced,
        kw_default=as_float(p_def / 1000.0, None),
        kw_fleet_cap=as_float(p_cap / 1000.0, None),
        kw_saved=as_float(kw, None),
        mwh_per_year_saved=as_float(kw * HOURS_PER_YEAR * opts.duty / 1000.0, None),
        tps_default=as_float(t_def, None),
        tps_fleet_cap=as_float(t_cap, None),
        tps_change_pct=as_float((t_cap / t_def - 1.0) * 100.0, None),
        kwh_per_mtok_default=as_float(kwh_mtok_def, None),
        kwh_per_mtok_fleet_cap=as_float(kwh_mtok_cap, None),
        cost_per_mtok_default=(
            as_float(kwh_mtok_def * tariff, None) if tariff is not None else None
        ),
        cost_per_mtok_fleet_cap=(
            as_float(kwh_mtok_cap * tariff, None) if tariff is not None else None
        ),
        reference=reference,
    )


def _throttle_from(card: CardCurve) -> float | None:
    hit = card.x[card.thermal_pct >= THROTTLE_PCT]
    return float(hit.min()) if len(hit) else None


def _beside_power(groups: list[FleetGroup]) -> list[FleetGroup]:
    """A clock group whose cards (GPU, count, load mode, model) also have a power group gets
    ``versus_power``: the fleet lock's pooled TPS/W and TPS per card against the fleet cap's."""
    power = {_cards_key(g): g for g in groups if g.axis_name == POWER}
    out = []
    for g in groups:
        other = power.get(_cards_key(g))
        lock, cap = g.answer, other.answer if other is not None else None
        if g.axis_name == POWER or lock is None or cap is None:
            out.append(g)
            continue
        versus = VersusPower(
            fleet_cap_w=known(cap.cap_w),
            fleet_cap_tps_per_w=cap.fleet_tps_per_w,
            fleet_cap_tps_per_card=cap.tps_per_card,
            tps_per_w_vs_fleet_cap_pct=_pct(lock.fleet_tps_per_w, cap.fleet_tps_per_w),
            tps_per_card_vs_fleet_cap_pct=_pct(lock.tps_per_card, cap.tps_per_card),
        )
        out.append(replace(g, versus_power=versus))
    return out


def _counted_once(groups: Sequence[FleetGroup]) -> list[FleetGroup]:
    """The groups the totals add up: one per set of cards (GPU, count, load mode, model), since
    cards swept on several axes are set to one answer and save once: on the power axis where
    they have one, else on the clock axis with the most tokens per joule (the one ``fleet
    apply`` sets)."""

    def rank(g: FleetGroup) -> tuple[bool, float]:
        answer = g.answer
        tpw = as_float(answer.fleet_tps_per_w if answer else None, 0.0)
        return g.axis_name == POWER, tpw

    best: dict[tuple[str | None, int | None, str | None, str | None], FleetGroup] = {}
    for g in groups:
        key = _cards_key(g)
        if key not in best or rank(g) > rank(best[key]):
            best[key] = g
    return list(best.values())


def _cards_key(g: FleetGroup) -> tuple[str | None, int | None, str | None, str | None]:
    return (g.gpu_name, g.n_gpus, g.load_mode, g.model)


def _pct(a: Num, b: Num) -> Num:
    if a is None or b is None or b == 0:
        return None
    return as_float((a / b - 1.0) * 100.0, None)


def group_title(group: FleetGroup) -> str:
    """A group's name in headings and charts: GPU (times count), load mode, model, and the
    axis when it is not the power cap."""
    gpu = str(group.gpu_name or "unknown GPU")
    n = int(group.n_gpus or 1)
    if n > 1:
        gpu = f"{n} x {gpu}"
    axis = group.axis_name
    tail = "" if axis == POWER else f" · {axis}"
    return f"{gpu} · {group.load_mode} · {group.model}{tail}"
