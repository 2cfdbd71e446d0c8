"""The run contract's names (docs/run-format.md), shared by the writer and the readers.

The sweep writes these files and the analysis reads them; neither imports the other, so the
column lists live here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypeAlias, overload

SCHEMA_VERSION = 1

# One row of a run file's CSV as polars names it (``iter_rows(named=True)``): column to cell. A
# cell is read through :func:`as_float` (or as text), never used as it comes.
CsvRow: TypeAlias = Mapping[str, object]

# A JSON value as ``json.dumps`` writes it: what a record's ``to_json`` builds.
JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None
# A JSON object a writer builds (a record's ``to_json``, a status line).
JsonObject: TypeAlias = dict[str, JsonValue]
# A JSON object as read (``json.loads``, a record's ``from_json``): each value narrowed where it
# is used (a number through :func:`as_float`).
JsonMap: TypeAlias = Mapping[str, object]

# caps.csv ``reason`` of a cap the confirm phase measured again: its readings are pooled.
CONFIRM_REASON = "confirm"
# caps.csv ``reason`` of the run's reference point read again at its end (the run-to-run term):
# its readings are pooled too. (An undervolt search's ``reference`` step is another point.)
REFERENCE_REASON = "reread"
# Repeats of a point that are pooled with its reading (any other repeat replaces it).
REPEAT_REASONS = frozenset({CONFIRM_REASON, REFERENCE_REASON})

SAMPLES_COLUMNS = (
    "t_s",
    "tick",
    "cap_w",
    "phase",
    "gpu_index",
    "power_w",
    "energy_mj",
    "temp_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_pct",
    "pstate",
    "throttle_power",
    "throttle_thermal",
    "clock_event_bits",
    "sm_lock_mhz",
    "mem_lock_mhz",
    "confirm",
    "power_instant_w",
    "sm_offset_mhz",
)
REQUESTS_COLUMNS = (
    "cap_w",
    "prompt_kind",
    "stream",
    "t_start_s",
    "t_first_token_s",
    "t_last_token_s",
    "t_end_s",
    "prompt_tokens",
    "completion_tokens",
    "token_source",
    "chunk_tokens",
    "decode_tps",
    "finish_reason",
    "ok",
    "error",
    "sm_lock_mhz",
    "mem_lock_mhz",
    "warnings",
    "server_decode_tps",
    "server_prompt_tps",
    "confirm",
    "max_tokens",
    "sm_offset_mhz",
    "stall_s",
)
# Short codes of requests.csv ``warnings`` (``;``-separated): what makes a request's numbers
# doubtful. Readers must tolerate codes they do not know.
WARN_NOT_STREAMED = "not_streamed"  # the server ignored stream=true (one JSON body, no timing)
WARN_NO_USAGE = "no_usage"  # no server token count: tokens are the client's chunk count
WARN_NO_FINISH = "no_finish"  # the stream ended without finish_reason or [DONE]
WARN_BAD_EVENTS = "bad_events"  # some stream events were not JSON
WARN_PACKED_CHUNKS = "packed_chunks"  # fewer token chunks than the server's token count
WARN_EXTRA_CHUNKS = "extra_chunks"  # more token chunks than the server's token count
WARN_IGNORED_MAX_TOKENS = "ignored_max_tokens"  # generated more tokens than max_tokens
WARN_USAGE_UNTRUSTED = "usage_untrusted"  # a token count the streamed text cannot hold
WARN_CUT_BY_RESET = "cut_by_reset"  # the server reset the stream mid-body: its tokens count
WARN_SERVER_BUSY = "server_busy"  # HTTP 429/503 answered first, retried honouring Retry-After
REQUEST_WARNING_CODES: tuple[str, ...] = (
    WARN_NOT_STREAMED,
    WARN_NO_USAGE,
    WARN_NO_FINISH,
    WARN_BAD_EVENTS,
    WARN_PACKED_CHUNKS,
    WARN_EXTRA_CHUNKS,
    WARN_IGNORED_MAX_TOKENS,
    WARN_USAGE_UNTRUSTED,
    WARN_SERVER_BUSY,
    WARN_CUT_BY_RESET,
)
# finish_reason of a request the client cut at its deadline, and of one the server reset
# mid-stream after delivering tokens: both measured the rate up to the cut.
CUT_BY_DEADLINE = "deadline"
CUT_BY_RESET = "reset"
CUT_FINISHES = (CUT_BY_DEADLINE, CUT_BY_RESET)
CAPS_COLUMNS = (
    "cap_w",
    "narr_tps",
    "code_tps",
    "prefill_tps",
    "power_w",
    "energy_j",
    "energy_sampled_j",
    "tps_per_w",
    "j_per_token",
    "j_per_token_u95_pct",
    "j_per_token_sampled",
    "kwh_per_mtok",
    "energy_tokens",
    "ttft_p50_ms",
    "ttft_p95_ms",
    "itl_p50_ms",
    "itl_p95_ms",
    "temp_max_c",
    "sm_clock_mhz",
    "mem_clock_mhz",
    "util_pct",
    "pwr_throttle_pct",
    "thermal_throttle_pct",
    "pstate",
    "n_samples",
    "n_requests",
    "n_gpus",
    "settle_s",
    "window_s",
    "status",
    "error",
    "reason",
    "concurrency",
    "narr_tps_spread_pct",
    "code_tps_spread_pct",
    "prefill_wall_tps",
    "prompt_tokens",
    "sm_lock_mhz",
    "mem_lock_mhz",
    "sm_clock_mhz_by_gpu",
    "mem_clock_mhz_by_gpu",
    "power_w_by_gpu",
    "tps_blocks",
    "temp_drift_c_per_min",
    "thermal_wait_s",
    "tps_u95_pct",
    "power_u95_pct",
    "tps_per_w_u95_pct",
    "tps_per_w_stat_u95_pct",
    "drift_bias_pct",
    "thermal_tau_s",
    "rounds",
    "stop_reason",
    "ttft_p95_hi_ms",
    "itl_p95_hi_ms",
    "sm_offset_mhz",
    "mem_offset_mhz",
    "answers_checked",
    "answers_differ",
    "tps_per_w_dof",
    "tps_per_w_within_u95_pct",
    "tps_per_w_within_dof",
    "tps_within_u95_pct",
    "tps_within_dof",
    "tps_drift_bias_pct",
    "power_step_w",
    "run_to_run_tps_sd_pct",
    "run_to_run_sd_pct",
    "run_to_run_dof",
    "run_to_run_pairs",
    "run_to_run_floor_pct",
    "power_drift_bias_pct",
    "power_sensors_pct",
    "narr_stall_pct",
    "code_stall_pct",
    "stall_run_pct",
    "t_mid_s",
    "run_drift_bias_pct",
    "tps_run_drift_bias_pct",
    "tps_fast_u95_pct",
    "tps_fast_dof",
)
# caps.csv columns a serving run adds after CAPS_COLUMNS (docs/run-format.md):
# the arrivals offered and taken, the latency percentiles, the targets' shares, goodput and
# energy per request. Other load modes' caps.csv has none of them.
SERVING_COLUMNS = (
    "request_rate_rps",
    "offered_rps",
    "achieved_rps",
    "n_offered",
    "n_completed",
    "n_refused",
    "n_failed",
    "n_cut",
    "in_flight_max",
    "max_in_flight",
    "ttft_p99_ms",
    "itl_p99_ms",
    "e2e_p50_ms",
    "e2e_p95_ms",
    "e2e_p99_ms",
    # each percentile's 95% interval (the p95s' upper ends are the columns above)
    "ttft_p50_lo_ms",
    "ttft_p50_hi_ms",
    "ttft_p95_lo_ms",
    "ttft_p99_lo_ms",
    "ttft_p99_hi_ms",
    "itl_p50_lo_ms",
    "itl_p50_hi_ms",
    "itl_p95_lo_ms",
    "itl_p99_lo_ms",
    "itl_p99_hi_ms",
    "e2e_p50_lo_ms",
    "e2e_p50_hi_ms",
    "e2e_p95_lo_ms",
    "e2e_p95_hi_ms",
    "e2e_p99_lo_ms",
    "e2e_p99_hi_ms",
    "max_ttft_ms",
    "max_itl_ms",
    "over_ttft_pct",
    "over_itl_pct",
    "goodput_rps",
    "j_per_request",
    "j_per_request_u95_pct",
    "saturated",
)
# The prompt kind (and sampler phase) of a serving run's measured requests and windows.
SERVE_KIND = "serve"


def caps_columns(load_mode: str) -> tuple[str, ...]:
    """The caps.csv columns a run of ``load_mode`` writes."""
    return CAPS_COLUMNS + SERVING_COLUMNS if load_mode == "serving" else CAPS_COLUMNS


# caps.csv columns of a clock-lock sweep (``--axis sm-clock|mem-clock|grid``); empty on the
# power axis.
CLOCK_LOCK_COLUMNS: tuple[str, ...] = ("sm_lock_mhz", "mem_lock_mhz")

# caps.csv columns that hold text; every other column is a number (empty when not measured).
CAPS_TEXT_COLUMNS: tuple[str, ...] = (
    "status",
    "error",
    "reason",
    "sm_clock_mhz_by_gpu",
    "mem_clock_mhz_by_gpu",
    "power_w_by_gpu",
    "tps_blocks",
    "stop_reason",
)
CAPS_FLOAT_COLUMNS: tuple[str, ...] = tuple(c for c in CAPS_COLUMNS if c not in CAPS_TEXT_COLUMNS)
SAMPLES_FLOAT_COLUMNS: tuple[str, ...] = tuple(
    c
    for c in SAMPLES_COLUMNS
    if c not in ("phase", "throttle_power", "throttle_thermal", "clock_event_bits", "confirm")
)
REQUESTS_FLOAT_COLUMNS: tuple[str, ...] = tuple(
    c
    for c in REQUESTS_COLUMNS
    if c
    not in ("prompt_kind", "token_source", "finish_reason", "ok", "error", "warnings", "confirm")
)


@overload
def as_float(value: object) -> float: ...
@overload
def as_float(value: object, missing: float) -> float: ...
@overload
def as_float(value: object, missing: None) -> float | None: ...
def as_float(value: Any, missing: float | None = math.nan) -> float | None:
    """A number from a run file's CSV cell, a JSON value or a record's field: the package's one
    coercion to a float.

    ``missing`` (NaN unless given; ``as_float(x, None)`` for an optional number) stands for
    what is no finite number: none (None, a field not written), a bool, text that does not read
    as a number, an infinity or NaN.
    """
    if value is None or isinstance(value, bool):
        return missing
    try:
        out = float(value)
    except (TypeError, ValueError):
        return missing
    return out if math.isfinite(out) else missing


# A text cell a spreadsheet would run as a formula starts with one of these (OWASP's CSV
# injection rule: =, +, -, @, and the tab and carriage return that hide them).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_safe(text: str) -> str:
    """``text`` as a CSV cell no spreadsheet runs (issue 46): a cell that starts like a formula
    gets a leading ``'`` (OWASP), a number (``-5``, ``+1e3``) is left as it is."""
    if not text.startswith(FORMULA_STARTS):
        return text
    try:
        float(text)
    except ValueError:
        return "'" + text
    return text
