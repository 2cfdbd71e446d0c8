"""The validation of a sweep's options: ranges, choices and combinations (no I/O).

:func:`validate` rejects what cannot work before anything is touched, with one line naming the
bad option. It is kept apart from :mod:`powersweep.sweep.options`, which defines the options, their
groups and how ``run.json`` records them, so each module holds one concern.
"""

from __future__ import annotations

import math

from powersweep.errors import UsageError
from powersweep.flags import out_of_bounds
from powersweep.sweep.gpu import MAX_CARD_W, MAX_CLOCK_MHZ
from powersweep.sweep.loads.arrivals import ArrivalProcess, read_prompts
from powersweep.sweep.loads.serving import MIN_WINDOW_ARRIVALS
from powersweep.sweep.loads.serving import min_window_s as serving_min_window_s
from powersweep.sweep.options import (
    AXES,
    BACKENDS,
    COOLING,
    KEEP_BUSY_MAX_S,
    LOAD_MODES,
    MAX_PLANNED_CAPS,
    MAX_PREFILL_SHARE,
    MAX_STREAMS,
    SETTLE_MODES,
    STRATEGIES,
    Axis,
    LoadMode,
    LoadOptions,
    SweepOptions,
    UndervoltOptions,
)
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.server.discovery import normalize_base_url


def _check_windows(windows: WindowPolicy) -> None:
    """A first round longer than a point's whole windows cannot be run (issue 46: the windows
    stopped at the maximum without a word). The default first round gives way to a shorter
    maximum (it is only a default); one given is refused."""
    if windows.min_s > windows.max_s and windows.min_s != WindowPolicy.min_s:
        raise UsageError(
            f"--min-cap-seconds {windows.min_s:g} is more than --target-cap-seconds "
            f"{windows.max_s:g} (a point's windows, every round together): give a minimum "
            "at most the target, or a longer target"
        )


def _check_ranges(options: SweepOptions) -> None:
    """Every numeric option finite and within the bounds its flag declares (``inf`` would
    never end a cap)."""
    m = options.measure
    for group in (m.windows, m, options.points, options.load, options.safety):
        if (message := out_of_bounds(group)) is not None:
            raise UsageError(message)
    if options.load.concurrency is not None and options.load.concurrency > MAX_STREAMS:
        raise UsageError(
            f"--concurrency {options.load.concurrency} is more streams than one client can drive "
            f"(at most {MAX_STREAMS})"
        )
    if options.load.load_target is not None and not math.isfinite(options.load.load_target):
        raise UsageError("--load-target is a fraction of the cap, between 0 and 1")
    if options.points.caps is not None and len(options.points.caps) > MAX_PLANNED_CAPS:
        raise UsageError(
            f"--caps lists {len(options.points.caps)} caps; at most {MAX_PLANNED_CAPS}"
        )
    for flag, values, high, unit in (
        ("--caps", options.points.caps, MAX_CARD_W, "W"),
        (
            "--cap",
            (options.points.hold_cap_w,) if options.points.hold_cap_w is not None else None,
            MAX_CARD_W,
            "W",
        ),
        ("--sm-clocks", options.points.sm_clocks, MAX_CLOCK_MHZ, "MHz"),
        ("--mem-clocks", options.points.mem_clocks, MAX_CLOCK_MHZ, "MHz"),
    ):
        too_high = [v for v in values or () if math.isfinite(v) and v > high]
        if too_high:
            raise UsageError(
                f"{flag} {too_high[0]:g} {unit} is more than any card takes "
                f"(at most {high:g} {unit})"
            )
    if options.server.url is not None:
        normalize_base_url(options.server.url)


def validate(options: SweepOptions) -> None:
    """Reject option combinations that cannot work, before touching anything.

    Raises:
        UsageError: One line naming the bad option.
    """
    if options.output.cooling not in COOLING:
        raise UsageError(
            f"--cooling must be one of {', '.join(COOLING)}, not {options.output.cooling!r}"
        )
    if options.load.mode not in LOAD_MODES:
        raise UsageError(
            f"--load-mode must be one of {', '.join(LOAD_MODES)}, not {options.load.mode!r}"
        )
    if options.points.strategy not in STRATEGIES:
        raise UsageError(f"--strategy must be dense or adaptive, not {options.points.strategy!r}")
    if options.measure.settle_mode not in SETTLE_MODES:
        raise UsageError(f"--settle must be auto or fixed, not {options.measure.settle_mode!r}")
    if options.cards.backend not in BACKENDS:
        raise UsageError(
            f"--backend must be one of {', '.join(BACKENDS)}, not {options.cards.backend!r}"
        )
    _validate_axis(options)
    if options.load.concurrency is not None and options.load.concurrency < 1:
        raise UsageError("--concurrency takes a number of streams (1 or more) or auto")
    if options.load.bench_runs < 1:
        raise UsageError("--bench-runs must be at least 1")
    if options.load.max_concurrency_probe < 1:
        raise UsageError("--max-concurrency-probe must be at least 1")
    if options.load.load_target is not None and not 0 < options.load.load_target <= 1:
        raise UsageError("--load-target is a fraction of the cap, between 0 and 1")
    if options.load.concurrency_stretch < 0:
        raise UsageError("--concurrency-stretch must be 0 or more")
    prefill = options.load.target_prefill_s
    if prefill is not None and not prefill > 0:
        raise UsageError("--target-prefill-seconds must be positive")
    _check_ranges(options)
    _check_windows(options.measure.windows)
    if (
        options.load.mode == "prefill-heavy"
        and prefill is not None
        and prefill > MAX_PREFILL_SHARE * options.measure.windows.max_s
    ):
        window_s = options.measure.windows.max_s
        raise UsageError(
            f"--target-prefill-seconds {prefill:g} does not fit a {window_s:g} s "
            f"window: lower caps prefill slower, and every prompt must end inside its window; "
            f"use at most {MAX_PREFILL_SHARE * window_s:g} (half of "
            "--target-cap-seconds) or a longer --target-cap-seconds"
        )
    if options.load.mode != "decode-concurrent" and (
        options.load.concurrency is not None
        or options.load.bench_runs != 1
        or options.load.load_target is not None
        or options.load.concurrency_stretch
    ):
        raise UsageError(
            "--concurrency, --bench-runs, --load-target and --concurrency-stretch need "
            "--load-mode decode-concurrent"
        )
    _validate_serving(options)
    if options.cards.gpus is not None and any(i < 0 for i in options.cards.gpus):
        raise UsageError("--gpu takes GPU indices 0, 1, ...")
    if options.safety.observe_only and options.points.caps:
        raise UsageError("--observe-only measures at the limit in force: drop --caps")
    if options.safety.observe_only and options.safety.dry_run:
        raise UsageError("--dry-run and --observe-only exclude each other")


def _validate_serving(options: SweepOptions) -> None:
    """The serving load's flags: only with it, each meaningful, a prompts file with prompts."""
    load, base = options.load, LoadOptions()
    given = [
        spec_name for name, spec_name in SERVING_FLAGS if getattr(load, name) != getattr(base, name)
    ]
    if load.mode != LoadMode.SERVING:
        if given:
            raise UsageError(f"{', '.join(given)} need --load-mode serving")
        return
    if load.burstiness != base.burstiness and load.arrivals != ArrivalProcess.GAMMA:
        raise UsageError("--burstiness shapes --arrivals gamma's gaps: add --arrivals gamma")
    if options.points.axis == Axis.UNDERVOLT:
        raise UsageError(
            "--load-mode serving cannot judge an undervolt step: its rate is the arrivals', "
            "not the card's; use decode-single or decode-concurrent"
        )
    if load.prompts_file is not None:
        read_prompts(load.prompts_file)
    needed = serving_min_window_s(load.request_rate_rps)
    if options.measure.windows.max_s < needed:
        raise UsageError(
            f"--request-rate {load.request_rate_rps:g} sends "
            f"{load.request_rate_rps * options.measure.windows.max_s:.3g} requests in a "
            f"{options.measure.windows.max_s:g} s window (--target-cap-seconds); a serving point "
            f"needs {MIN_WINDOW_ARRIVALS} or more: give --target-cap-seconds "
            f"{math.ceil(needed)} or more, or a higher rate"
        )


# (field, flag) of the serving load's options
SERVING_FLAGS = (
    ("request_rate_rps", "--request-rate"),
    ("arrivals", "--arrivals"),
    ("burstiness", "--burstiness"),
    ("lengths", "--lengths"),
    ("prompts_file", "--prompts-file"),
    ("max_in_flight", "--max-in-flight"),
    ("max_ttft_ms", "--max-ttft-ms"),
    ("max_itl_ms", "--max-itl-ms"),
)


def _validate_axis(options: SweepOptions) -> None:
    """The clock-sweep flags: only on a clock axis, and consistent with it."""
    points = options.points
    if points.axis not in AXES:
        raise UsageError(f"--axis must be one of {', '.join(AXES)}, not {points.axis!r}")
    if points.axis != Axis.UNDERVOLT and options.undervolt != UndervoltOptions():
        raise UsageError(
            "--offset-step, --offset-margin, --soak-seconds, --max-offset and the --mem-offset "
            "flags work only with --axis undervolt"
        )
    clock_flags = {
        "--sm-clocks": points.sm_clocks,
        "--mem-clocks": points.mem_clocks,
        "--cap": points.hold_cap_w,
        "--sm-clock-min": points.sm_clock_min_mhz,
    }
    if not points.clock_axis:
        given = [flag for flag, value in clock_flags.items() if value is not None]
        if given:
            raise UsageError(
                f"{', '.join(given)} work only on a clock axis (--axis sm-clock, mem-clock, "
                "grid or undervolt); the power axis takes --caps"
            )
        return
    if points.caps:
        raise UsageError(
            f"--caps steps the power limit; --axis {points.axis} holds one limit: use --cap W"
        )
    if points.hold_cap_w is not None and not (
        math.isfinite(points.hold_cap_w) and points.hold_cap_w > 0
    ):
        raise UsageError("--cap must be a positive number of watts")
    low = points.sm_clock_min_mhz
    if low is not None and not (math.isfinite(low) and low > 0):
        raise UsageError("--sm-clock-min takes a positive number of MHz")
    if low is not None and points.axis == Axis.MEM_CLOCK and not points.sm_clocks:
        raise UsageError("--sm-clock-min is the bottom of an SM lock: --axis mem-clock sets none")
    for flag, values in (
        ("--sm-clocks", points.sm_clocks),
        ("--mem-clocks", points.mem_clocks),
    ):
        if values is not None and (not values or any(not v > 0 for v in values)):
            raise UsageError(f"{flag} takes positive MHz like {flag} 900,1200")
    if points.axis == Axis.SM_CLOCK and points.mem_clocks and len(points.mem_clocks) > 1:
        raise UsageError(
            "--axis sm-clock holds one memory lock: give one --mem-clocks value, or use --axis grid"
        )
    if points.axis == Axis.MEM_CLOCK and points.sm_clocks and len(points.sm_clocks) > 1:
        raise UsageError(
            "--axis mem-clock holds one SM lock: give one --sm-clocks value, or use --axis grid"
        )
    if options.safety.observe_only and (
        points.sm_clocks or points.mem_clocks or points.hold_cap_w is not None
    ):
        raise UsageError(
            "--observe-only measures at the clocks and limit in force: drop --sm-clocks, "
            "--mem-clocks and --cap"
        )
    if points.axis == Axis.UNDERVOLT:
        _validate_undervolt(options)


def _validate_undervolt(options: SweepOptions) -> None:
    """The undervolt search: one SM lock (or none: the clock its cap holds), no memory locks,
    a search that changes the card, and offsets it can step."""
    points, uv = options.points, options.undervolt
    if points.sm_clocks is not None and len(points.sm_clocks) != 1:
        raise UsageError("--axis undervolt locks one SM clock: give one --sm-clocks value")
    if points.mem_clocks is not None:
        raise UsageError("--axis undervolt leaves the memory clock alone: drop --mem-clocks")
    if options.safety.observe_only:
        raise UsageError("--axis undervolt sets clock offsets: it cannot be --observe-only")
    if options.output.tariff_per_kwh is not None:
        # the search's answer is its own (UndervoltAxis.analyze): no price chooses it
        raise UsageError(
            "--tariff cannot choose an undervolt search's answer (the highest offset that held, "
            "less its margin): drop it"
        )
    if options.safety.no_reset:
        # the last step a search sets is the first that failed: it must never stay on the card
        raise UsageError(
            "--axis undervolt ends on the offset that failed its check, so its offsets always "
            "come back: drop --no-reset (`powersweep apply RUN_DIR` sets the answer it measured)"
        )
    if not (math.isfinite(uv.offset_step_mhz) and uv.offset_step_mhz > 0):
        raise UsageError("--offset-step must be a positive number of MHz")
    if not (math.isfinite(uv.margin_mhz) and uv.margin_mhz >= 0):
        raise UsageError("--offset-margin must be 0 or more MHz")
    if not (math.isfinite(uv.soak_s) and 0 <= uv.soak_s <= KEEP_BUSY_MAX_S):
        raise UsageError(
            f"--soak-seconds takes 0 to {KEEP_BUSY_MAX_S:g} (the longest the load keeps a card "
            "busy between two measurements)"
        )
    if not (math.isfinite(uv.mem_offset_step_mhz) and uv.mem_offset_step_mhz >= 0):
        raise UsageError("--mem-offset-step must be 0 (no memory phase) or more MHz")
    for flag, mhz in (
        ("--max-mem-offset", uv.max_mem_offset_mhz),
        ("--mem-offset-margin", uv.mem_margin_mhz),
    ):
        if mhz is not None and not (math.isfinite(mhz) and mhz >= 0):
            raise UsageError(f"{flag} must be 0 or more MHz")
    if uv.max_offset_mhz is not None and not (
        math.isfinite(uv.max_offset_mhz) and uv.max_offset_mhz >= uv.offset_step_mhz
    ):
        raise UsageError("--max-offset must be at least one --offset-step")
