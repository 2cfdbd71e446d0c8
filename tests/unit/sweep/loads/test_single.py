"""decode-single (``sweep/loads/single.py``): a failure that cost little of a window is a counted
fault, not a failed point; a window the server served too little of still fails (measured again
at the end); both prompts or the metric's alone; the keep-busy stream; the ratio check."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from powersweep.clock import ManualClock
from powersweep.sweep.loads.base import MIN_MEASURED_SHARE, History, LoadRun, measured_share
from powersweep.sweep.loads.single import DecodeSingle
from powersweep.sweep.server.request import RequestResult
from tests.fakes.fake_chat import FakeChat

TPS = 30.0


class _Labels:
    def label(self, cap_w: float, phase: str) -> None:
        pass


class _Client:
    """Streams each request at TPS for the tokens asked (at most 4 s of them); the requests
    numbered in ``fail`` fail at once after ``fail_s`` with no token."""

    def __init__(self, clock: ManualClock, fail: set[int], fail_s: float) -> None:
        self.clock, self.fail, self.fail_s, self.n = clock, fail, fail_s, 0

    async def chat(self, prompt: str, *, max_tokens: int, prompt_kind: str, **_: Any) -> Any:
        self.n += 1
        t0 = self.clock.now()
        if self.n in self.fail:
            self.clock.advance(self.fail_s)
            return _single_result(prompt_kind, t0, (), ok=False, end=self.clock.now())
        n = max(2, min(max_tokens, int(4.0 * TPS)))
        times = tuple(t0 + 0.1 + k / TPS for k in range(n))
        self.clock.advance(times[-1] - t0 + 0.01)
        return _single_result(
            prompt_kind, t0, times, ok=True, end=self.clock.now(), limit=max_tokens
        )


def _single_result(
    kind: str, t0: float, times: tuple[float, ...], *, ok: bool, end: float, limit: int = 0
) -> RequestResult:
    nan = float("nan")
    return RequestResult(
        prompt_kind=kind,
        stream=0,
        t_start_s=t0,
        t_first_token_s=times[0] if times else nan,
        t_last_token_s=times[-1] if times else nan,
        t_end_s=end,
        prompt_tokens=40,
        completion_tokens=len(times) if ok else None,
        token_source="usage",
        chunk_tokens=len(times),
        token_times_s=times or None,
        finish_reason="length" if ok else None,
        ok=ok,
        error="" if ok else "HTTP 500: boom",
        max_tokens=limit or None,
    )


def _measure_single(fail: set[int], fail_s: float) -> Any:
    clock = ManualClock()
    load = DecodeSingle(_Client(clock, fail, fail_s), clock, _Labels(), 10.0)
    return asyncio.run(load.measure(300.0, metric_only=True))


def test_a_quick_failure_in_a_window_is_a_fault_and_the_rate_stands() -> None:
    run = _measure_single({2}, fail_s=0.05)
    assert run.errors == []
    assert run.tps["narr_tps"] == pytest.approx(TPS, rel=0.01)
    assert any(not r.ok for r in run.requests)  # kept: the fault log counts it


def test_a_window_the_server_served_too_little_of_fails() -> None:
    run = _measure_single({2}, fail_s=4.0)  # the failed request held 4 s of the 10 s window
    (error,) = run.errors
    assert "1 of" in error and "of the window was measured" in error
    assert run.tps["narr_tps"] != run.tps["narr_tps"]  # NaN


def test_the_measured_share_counts_usable_requests_inside_the_window_only() -> None:
    ok = _single_result("narr", 1.0, (1.1, 2.0), ok=True, end=3.0)
    early = _single_result("narr", -2.0, (-1.9, -1.0), ok=True, end=0.5)  # half a second inside
    bad = _single_result("narr", 3.0, (), ok=False, end=4.0)
    windows = [("narr", 0.0, 10.0), ("code", 10.0, 20.0)]
    assert measured_share([ok, early, bad], windows, "narr") == pytest.approx(0.25)
    assert measured_share([ok], windows, "prefill") == 0.0
    assert 0 < MIN_MEASURED_SHARE < 1


# --- both prompts, the keep-busy stream and the check ------------------------------------------


def test_both_prompts_are_measured_unless_only_the_metric_is_asked_for() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=TPS)
    load = DecodeSingle(chat, clock, _Labels(), 10.0)
    assert asyncio.run(load.prepare(300.0)) == {} and load.apply({"x": 1}) == {}
    run = asyncio.run(load.measure(300.0))
    assert [k for k, _, _ in run.windows] == ["narr", "code"]
    assert run.tps["narr_tps"] == pytest.approx(TPS) and run.tps["code_tps"] == pytest.approx(TPS)
    assert math.isnan(run.tps["prefill_tps"])
    short = asyncio.run(load.measure(300.0, metric_only=True, window_s=4.0))
    assert [k for k, _, _ in short.windows] == ["narr"]
    assert short.windows[0][2] - short.windows[0][1] <= 4.0 + 0.4 + 1e-9
    assert math.isnan(short.tps["code_tps"])


def test_keep_busy_streams_the_narrative_prompt() -> None:
    clock = ManualClock()
    chat = FakeChat(clock, tps=TPS, max_stream_s=3.0)
    seen: list[Any] = []
    load = DecodeSingle(chat, clock, _Labels(), 10.0)
    asyncio.run(load.keep_busy(300.0, 8.0, on_result=seen.append))
    assert len(seen) == len(chat.calls) >= 2
    assert {c.prompt_kind for c in chat.calls} == {"settle"}
    assert clock.now() >= 8.0


def test_the_check_names_a_ratio_far_off_the_other_points() -> None:
    load = DecodeSingle(FakeChat(ManualClock()), ManualClock(), _Labels(), 10.0)
    run = LoadRun(tps={"narr_tps": 30.0, "code_tps": 60.0})
    assert load.check(run, History(ratios=(1.0, 1.05, 0.95))).startswith(
        "code/narrative rate ratio 2 is 2x off the 1 of the other points"
    )
    assert load.check(run, History(ratios=(1.9, 2.0, 2.1))) == ""
    assert load.check(run, History(ratios=(1.0, 1.0))) == ""  # too few points to judge
