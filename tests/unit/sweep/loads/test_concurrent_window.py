"""powersweep.sweep.loads.concurrent_window: decode-concurrent's counting from chunk arrival times.
A window counts exactly the tokens that arrived inside it (edges included), each request at its
own tokens per chunk where the server counted a finished answer, else the default; the window's
blocks cover it once; the spread and the moment every stream was running."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from powersweep.sweep.loads.concurrent_window import (
    Window,
    _all_streams_running_s,
    spread_pct,
    tokens_in_window,
    tokens_per_chunk,
    window_blocks,
)


@dataclass(frozen=True)
class _Result:
    token_times_s: tuple[float, ...] | None = None
    completion_tokens: int | None = None
    chunk_tokens: int = 0
    token_source: str = "usage"
    finish_reason: str | None = "length"
    ok: bool = True
    stream: int = 0
    t_first_token_s: float = math.nan


def _done(times: tuple[float, ...], tokens: int | None, **changes: object) -> _Result:
    fields: dict[str, object] = {"completion_tokens": tokens, **changes}
    return _Result(times, chunk_tokens=len(times), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changes", "per_chunk"),
    [
        ({}, 3.0),  # a finished answer the server counted: its own ratio
        ({"token_source": "timings"}, 3.0),  # llama.cpp's timings count as well
        ({"token_source": "chunks"}, 1.5),  # counted by the client: the default
        ({"finish_reason": "deadline"}, 1.5),  # cut at the window's end: no count of its own
        ({"ok": False}, 1.5),
        ({"completion_tokens": 0}, 1.5),
        ({"completion_tokens": None}, 1.5),
    ],
)
def test_tokens_per_chunk_uses_the_servers_count_only_for_a_whole_counted_answer(
    changes: dict[str, object], per_chunk: float
) -> None:
    result = _done((1.0, 2.0, 3.0, 4.0), 12, **changes)
    assert tokens_per_chunk(result, 1.5) == per_chunk


def test_no_chunks_never_divides_by_zero() -> None:
    assert tokens_per_chunk(_Result((), 10, 0), 2.0) == 2.0


def test_the_window_counts_its_edges_and_nothing_outside() -> None:
    packed = _done((0.9, 1.0, 1.5, 2.0, 2.1), 10)  # 2 tokens per chunk
    cut = _Result((1.2, 1.8), None, 2, "chunks", "deadline")
    assert tokens_in_window([packed, cut], 1.0, 2.0, default_per_chunk=1.0) == 3 * 2.0 + 2 * 1.0
    assert tokens_in_window([_Result(None, None, 0)], 0.0, 9.0, default_per_chunk=1.0) == 0.0
    assert tokens_in_window([], 0.0, 9.0, default_per_chunk=1.0) == 0.0


def test_blocks_split_the_window_and_count_an_edge_token_once() -> None:
    times = tuple(0.5 * k for k in range(9))  # 0.0 .. 4.0, tokens on every block edge
    result = _done(times, 9)
    blocks = window_blocks([result], 0.0, 4.0, 1.0, 4)
    assert [s for _, s in blocks] == [1.0] * 4
    assert [t for t, _ in blocks] == [2.0, 2.0, 2.0, 3.0]  # the last block is closed
    assert sum(t for t, _ in blocks) == tokens_in_window([result], 0.0, 4.0, 1.0)


def test_an_empty_or_backwards_window_has_no_blocks() -> None:
    assert window_blocks([_done((1.0,), 1)], 2.0, 2.0, 1.0, 4) == []
    assert window_blocks([_done((1.0,), 1)], 3.0, 2.0, 1.0, 4) == []


@pytest.mark.parametrize(
    ("values", "spread"),
    [
        ([100.0, 110.0, 90.0], 20.0),
        ([50.0, math.nan, 60.0, math.inf], 100 * 10 / 55),
        ([5.0, 5.0], 0.0),
    ],
)
def test_spread_is_the_range_over_the_median_of_finite_values(
    values: list[float], spread: float
) -> None:
    assert spread_pct(values) == pytest.approx(spread)


@pytest.mark.parametrize("values", [[], [1.0], [3.0, math.nan], [-1.0, 0.0, 1.0]])
def test_spread_is_unknown_without_two_values_or_with_a_zero_median(values: list[float]) -> None:
    assert math.isnan(spread_pct(values))


def test_every_stream_runs_once_its_slowest_first_token_arrived() -> None:
    results = [
        _Result(stream=0, t_first_token_s=1.0),
        _Result(stream=0, t_first_token_s=4.0),  # a later request of a running stream
        _Result(stream=1, t_first_token_s=2.5),
        _Result(stream=2, t_first_token_s=math.nan),  # produced nothing
    ]
    assert _all_streams_running_s(results) == 2.5
    assert _all_streams_running_s([_Result(stream=3)]) is None
    assert _all_streams_running_s([]) is None


def test_a_window_holds_its_figures() -> None:
    w = Window(4, 1.0, 11.0, 500.0, 50.0, 0, None)
    assert (w.n_streams, w.t1_s - w.t0_s, w.tokens / (w.t1_s - w.t0_s)) == (4, 10.0, w.tps)
