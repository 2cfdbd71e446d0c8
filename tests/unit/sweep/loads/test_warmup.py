"""The warm-up (``sweep/loads/warmup.py``) on a scripted client and sampler: it ends once every
prompt kind's rate, the draw and the temperature are steady, after its request budget, after
its bound of windows, or when no request completes; and it teaches the pace the first point's
requests are sized from."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest

from powersweep.clock import ManualClock
from powersweep.sweep.loads.base import TOO_SLOW, window_margin_s
from powersweep.sweep.loads.pace import PROBE_TOKENS, Pace
from powersweep.sweep.loads.warmup import WARMUP_WINDOWS, Warmup, warmup
from tests.fakes.fake_chat import FakeChat


class _Sampler:
    """Draws from ``draw(n)`` (the n-th asked, from 0) and a fixed temperature slope."""

    def __init__(self, draw: Callable[[int], float] = lambda _n: 300.0, slope: float = 0.0):
        self.draw, self.slope = draw, slope
        self.labels: list[tuple[float, str]] = []
        self.asked = 0

    def label(self, cap_w: float, phase: str) -> None:
        self.labels.append((cap_w, phase))

    def median_power_w(self, t0_s: float, t1_s: float) -> float:
        self.asked += 1
        return self.draw(self.asked - 1)

    def temp_slope_c_per_s(self, t0_s: float, t1_s: float) -> float:
        return self.slope


def _warmup(
    chat: FakeChat, sampler: _Sampler, *, window_s: float = 10.0, max_requests: int = 6
) -> tuple[Warmup, Pace]:
    pace = Pace()
    done = asyncio.run(
        warmup(chat, chat.clock, sampler, 350.0, pace, window_s=window_s, max_requests=max_requests)
    )
    return done, pace


def test_a_steady_server_and_card_end_the_warmup_after_two_rounds() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0)
    sampler = _Sampler()
    done, pace = _warmup(chat, sampler)
    assert done.steady
    assert done.reason == "rate and draw steady within 2%, temperature within 0.05 C/s"
    assert [c.prompt_kind for c in chat.calls] == ["warmup"] * 4
    assert len(done.results) == 4 and all(r.ok for r in done.results)
    assert done.duration_s == pytest.approx(clock.now())
    assert sampler.labels == [(350.0, "warmup")]
    # the first request of each kind is a short probe; the next last half a window
    assert [c.max_tokens for c in chat.calls[:2]] == [PROBE_TOKENS, PROBE_TOKENS]
    assert chat.calls[2].max_tokens == math.ceil(30.0 * (0.97 * 5.0 - 0.1))
    assert pace.decode_tps == {"narr": pytest.approx(30.0), "code": pytest.approx(30.0)}
    assert done.record() == {
        "requests": 4,
        "steady": True,
        "reason": done.reason,
        "duration_s": done.duration_s,
    }


def test_a_probe_may_run_to_the_bound_and_a_known_kind_to_two_halves_and_a_margin() -> None:
    clock = ManualClock()
    chat = FakeChat(clock)
    _warmup(chat, _Sampler())
    end = WARMUP_WINDOWS * 10.0
    assert [c.deadline_s for c in chat.calls[:2]] == [end, end]
    third = chat.calls[2]
    assert third.deadline_s == pytest.approx(third.t_start_s + 2 * 5.0 + window_margin_s(10.0))


def test_a_heating_card_is_not_steady_and_the_budget_ends_the_warmup() -> None:
    chat = FakeChat(ManualClock(), tps=30.0)
    done, _ = _warmup(chat, _Sampler(slope=0.1), window_s=60.0, max_requests=3)
    assert not done.steady
    assert done.reason == "3 requests per prompt"
    assert len(done.results) == 6


def test_a_draw_that_keeps_moving_is_not_steady() -> None:
    chat = FakeChat(ManualClock(), tps=30.0)
    sampler = _Sampler(draw=lambda n: 300.0 + 10.0 * n)
    done, _ = _warmup(chat, sampler, window_s=60.0, max_requests=3)
    assert (done.steady, done.reason, len(done.results)) == (False, "3 requests per prompt", 6)
    assert sampler.asked == 6  # one draw per completed request


def test_a_draw_never_read_leaves_the_rates_to_decide() -> None:
    chat = FakeChat(ManualClock(), tps=30.0)
    done, _ = _warmup(chat, _Sampler(draw=lambda _n: math.nan))
    assert done.steady and len(done.results) == 4


def test_the_warmup_is_bounded_by_three_windows() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=30.0)
    done, _ = _warmup(chat, _Sampler(slope=1.0), window_s=4.0, max_requests=100)
    assert not done.steady
    assert done.reason == "its bound of 3 windows (12 s)"
    assert all(c.t_start_s < 12.0 for c in chat.calls)
    assert clock.now() <= 12.0 + 1e-9


def test_no_completed_request_ends_the_warmup_after_one_round() -> None:
    chat = FakeChat(ManualClock(), fail=range(1, 100))
    done, pace = _warmup(chat, _Sampler())
    assert (done.steady, done.reason, len(done.results)) == (False, "no request completed", 2)
    assert not pace.knows("narr")


def test_a_request_that_got_no_token_before_its_deadline_is_a_failure() -> None:
    chat = FakeChat(ManualClock(), ttft_s=100.0)  # no first token within the bound
    done, _ = _warmup(chat, _Sampler(), window_s=10.0)
    assert done.reason == "no request completed"
    assert not done.results[0].ok and TOO_SLOW in done.results[0].error


def test_no_warmup_requests_is_no_warmup() -> None:
    clock = ManualClock()
    chat = FakeChat(clock)
    done, _ = _warmup(chat, _Sampler(), max_requests=0)
    assert (done.results, done.steady, done.reason) == ([], False, "0 requests per prompt")
    assert chat.calls == [] and clock.now() == 0.0
