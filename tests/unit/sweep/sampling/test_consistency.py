"""The consistency checks in run seconds: a prefill prompt that stands out is a pause only when
it stands out against itself too (the same prompt of the window at the nearest points)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from powersweep.sweep.loads.base import History, LoadRun
from powersweep.sweep.sampling.consistency import (
    nearest_by_rank,
    prefill_by_rank,
    ttft_outlier_reason,
)

TOKENS = 2000


@dataclass(frozen=True)
class R:
    t_start_s: float
    t_first_token_s: float
    prompt_tokens: int = TOKENS
    prompt_kind: str = "prefill"
    ok: bool = True


def _window(t0: float, ttfts: list[float]) -> tuple[list[R], tuple[str, float, float]]:
    out, t = [], t0
    for ttft in ttfts:
        out.append(R(t, t + ttft))
        t += ttft + 0.2
    return out, ("prefill", t0, t)


def test_a_prompt_slower_than_its_peers_at_one_point_only_is_a_pause() -> None:
    requests, window = _window(0.0, [4.55, 2.75, 2.75])
    reason = ttft_outlier_reason(requests, [], [window], {})
    assert "took 4.55 s to its first token where its peers took 2.75 s" in reason


def test_a_prompt_as_slow_as_itself_at_the_nearest_points_is_systematic() -> None:
    # the first prompt of every window takes 4.55 s, the others 2.75 s: at every point alike
    history: dict[float, dict[int, float]] = {}
    for cap in (200.0, 210.0, 220.0):
        reqs, win = _window(cap, [4.5, 2.7, 2.7])
        history[cap] = prefill_by_rank(reqs, [win])
    assert history[200.0] == pytest.approx({0: 4.5 / TOKENS, 1: 2.7 / TOKENS, 2: 2.7 / TOKENS})
    requests, window = _window(0.0, [4.55, 2.75, 2.75])
    same = nearest_by_rank(history, 190.0)
    assert ttft_outlier_reason(requests, [], [window], same) == ""
    # a real pause still shows: the second prompt, fast elsewhere, took twice as long
    paused, window = _window(0.0, [4.55, 5.6, 2.75])
    assert "took 5.6 s" in ttft_outlier_reason(paused, [], [window], same)


def test_ranks_count_each_round_of_a_point_from_its_own_start() -> None:
    first, w1 = _window(0.0, [4.0, 2.0])
    second, w2 = _window(100.0, [4.2, 2.2])
    ranks = prefill_by_rank([*first, *second], [w1, w2])
    assert ranks == pytest.approx({0: 4.1 / TOKENS, 1: 2.1 / TOKENS})


def test_the_prefill_load_check_reads_the_ranks_from_the_history() -> None:
    from powersweep.sweep.loads.prefill import PrefillHeavy

    history = {c: {0: 4.5 / TOKENS, 1: 2.7 / TOKENS} for c in (200.0, 210.0, 220.0)}
    requests, window = _window(0.0, [4.55, 2.75, 2.75])
    run = LoadRun(requests=list(requests), windows=[window])
    check = PrefillHeavy.check
    assert check(object.__new__(PrefillHeavy), run, History(position=190.0)) != ""
    assert (
        check(object.__new__(PrefillHeavy), run, History(position=190.0, prefill_by_rank=history))
        == ""
    )
