"""The undervolt search's stability check: answers, the card, clock stretching."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from powersweep.errors import GpuError, PowersweepError
from powersweep.sweep.gpu import ClockOffset, LockedClocks
from powersweep.sweep.loads.prompts import NARRATIVE_PROMPT
from powersweep.sweep.measurement.stability import (
    GREEDY_SEED,
    StabilityCheck,
    Verdict,
    check_step,
    fitted_probes,
    probes,
)
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.verdict import FaultLog


@dataclass(frozen=True)
class _Answer:
    text: str
    completion_tokens: int | None = 5
    error: str = ""
    prompt_tokens: int | None = None


class _Client:
    """Answers each prompt with its own text, corrupted or failing on demand."""

    def __init__(self) -> None:
        self.corrupt = False
        self.flaky = False
        self.fail = ""
        self.calls: list[dict[str, Any]] = []
        self.prompt_tokens: int | None = None

    async def greedy(
        self,
        prompt: str,
        *,
        max_tokens: int,
        seed: int,
        deadline_s: float | None = None,
        **kw: Any,
    ) -> _Answer:
        self.calls.append({"max_tokens": max_tokens, "seed": seed, "deadline_s": deadline_s, **kw})
        if self.fail:
            return _Answer("", None, self.fail)
        if max_tokens == 1:
            return _Answer("x", 1, prompt_tokens=self.prompt_tokens)
        text = prompt[-20:]
        if self.corrupt or (self.flaky and len(self.calls) % 2 == 0):
            text += " garbled"
        return _Answer(text)


class _Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def now(self) -> float:
        return self.t

    async def asleep(self, seconds: float) -> None:
        self.t += seconds


@dataclass(frozen=True)
class _Sample:
    power_w: float
    temp_c: float


class _Card:
    def __init__(self, clock: _Clock | None = None) -> None:
        self.index = 0
        self.offset = 60.0
        self.lock: float | None = 1680.0
        self.lost = False
        self.clock = clock
        self.back_at = float("inf")
        self.xids: list[int] | None = []

    def xid_events(self) -> tuple[int, ...] | None:
        if self.xids is None:
            return None
        out, self.xids = tuple(self.xids), []
        return out

    def _check_bus(self) -> None:
        if self.lost and not (self.clock and self.clock.t >= self.back_at):
            raise GpuError("GPU 0 has fallen off the bus")

    def sm_clock_offset(self) -> ClockOffset:
        self._check_bus()
        return ClockOffset(True, self.offset, -200.0, 1000.0)

    def read_sample(self) -> object:
        if self.lost and not (self.clock and self.clock.t >= self.back_at):
            return _Sample(float("nan"), float("nan"))  # an off-bus read fails, NaN
        return _Sample(300.0, 60.0)

    def locked_clocks(self) -> LockedClocks:
        return LockedClocks(True, self.lock, None)


POINT = SweepPoint(280.0, 1680.0, None, 60.0)


def _stability_check(client: _Client, card: _Card | None = None) -> StabilityCheck:
    clock = card.clock if card and card.clock else _Clock()
    return StabilityCheck(client, [card or _Card()], clock)  # type: ignore[list-item,arg-type]


def _ref(check: StabilityCheck, tps: float = 40.0, u95: float = 1.0) -> Verdict:
    return asyncio.run(check.take_reference({"narr_tps": tps, "tps_u95_pct": u95}))


def test_probes_cover_decode_and_prefill_and_fit_the_context() -> None:
    kinds = [p.kind for p in probes()]
    assert kinds == ["narr", "code", "prefill"]
    long_prompt = probes()[2].prompt
    short = probes(context_tokens=1024)[2].prompt
    assert len(short) < len(long_prompt)
    assert len(short) / 4 <= 1024 // 2 + 100


def test_the_reference_is_taken_twice_with_the_fixed_seed() -> None:
    client = _Client()
    check = _stability_check(client)
    verdict = _ref(check)
    assert verdict.stable and verdict.checked == 6
    # one short request sizes the prefill probe (this client has no tokenizer to ask), then
    # the three probes twice
    assert len(client.calls) == 7 and client.calls[0]["max_tokens"] == 1
    assert {c["seed"] for c in client.calls} == {GREEDY_SEED}
    assert all(c["deadline_s"] > 100.0 for c in client.calls[1:])
    assert check.reference is not None and len(check.reference) == 3


def test_a_server_whose_greedy_answers_differ_at_offset_zero_is_refused() -> None:
    client = _Client()
    client.flaky = True
    with pytest.raises(PowersweepError, match="not repeatable at offset 0"):
        _ref(_stability_check(client))


def test_a_failing_reference_is_refused() -> None:
    client = _Client()
    client.fail = "HTTP 500"
    with pytest.raises(PowersweepError, match=r"reference at offset 0 failed.*HTTP 500"):
        _ref(_stability_check(client))


def _check_step(
    check: StabilityCheck, row: dict[str, Any] | None = None, errors: int = 0
) -> Verdict:
    row = {"status": "ok", "narr_tps": 40.0, "tps_u95_pct": 1.0} if row is None else row
    return asyncio.run(check.check(POINT, row, errors))


def test_a_step_with_identical_answers_is_stable() -> None:
    client = _Client()
    check = _stability_check(client)
    _ref(check)
    verdict = _check_step(check)
    assert verdict.stable and (verdict.checked, verdict.differ) == (3, 0)
    assert verdict.columns() == {"answers_checked": 3, "answers_differ": 0}


def test_corrupted_answers_make_the_step_unstable() -> None:
    client = _Client()
    check = _stability_check(client)
    _ref(check)
    client.corrupt = True
    verdict = _check_step(check)
    assert not verdict.stable and verdict.differ == 3
    assert any("narr answer differs" in p for p in verdict.problems)


def test_failed_probes_are_problems_not_compared_answers() -> None:
    client = _Client()
    check = _stability_check(client)
    _ref(check)
    client.fail = "CUDA error: an illegal memory access was encountered"
    verdict = _check_step(check)
    assert not verdict.stable and (verdict.checked, verdict.differ) == (0, 0)
    assert "illegal memory access" in verdict.problems[0]


def test_a_reset_card_is_found_by_its_offset_or_its_lock_or_its_reads() -> None:
    for change in ("offset", "lock", "lost"):
        client, card = _Client(), _Card()
        check = _stability_check(client, card)
        _ref(check)
        if change == "offset":
            card.offset = 0.0
        elif change == "lock":
            card.lock = None
        else:
            card.lost = True
        verdict = _check_step(check)
        assert verdict.reset and not verdict.stable, change


def test_an_offset_read_back_as_the_driver_rounded_it_is_no_reset() -> None:
    # the step set +60 MHz; a driver that snaps to its 15 MHz grid may read back +50 or +65
    for read in (50.0, 65.0):
        client, card = _Client(), _Card()
        check = _stability_check(client, card)
        _ref(check)
        card.offset = read
        verdict = _check_step(check)
        assert not verdict.reset and verdict.stable, read


def test_read_errors_and_a_failed_measurement_are_problems() -> None:
    check = _stability_check(_Client())
    _ref(check)
    assert "2 GPU read(s) failed" in _check_step(check, errors=2).problems[0]
    failed = {"status": "failed", "error": "server closed the connection", "narr_tps": None}
    assert "failed (server closed the connection)" in _check_step(check, failed).problems[0]


def test_clock_stretching_is_a_drop_beyond_both_points_noise() -> None:
    check = _stability_check(_Client())
    _ref(check, tps=40.0, u95=1.0)
    # 2% below with +-1% on each: beyond the 1.4% combined noise
    assert any(
        "clock stretches" in p
        for p in _check_step(check, {"status": "ok", "narr_tps": 39.2, "tps_u95_pct": 1.0}).problems
    )
    # 1.2% below: within it
    assert _check_step(check, {"status": "ok", "narr_tps": 39.52, "tps_u95_pct": 1.0}).stable
    # no stated noise: 3% assumed for it (1% stated for the reference: 3.2% together)
    assert _check_step(check, {"status": "ok", "narr_tps": 38.9, "tps_u95_pct": None}).stable
    # faster is never stretching
    assert _check_step(check, {"status": "ok", "narr_tps": 45.0, "tps_u95_pct": 1.0}).stable


def _marked(check: StabilityCheck, row: dict[str, Any]) -> tuple[Any, FaultLog, list[str]]:
    faults, said = FaultLog(), []
    error = asyncio.run(check_step(check, POINT, row, 0, faults, said.append))
    return error, faults, said


def test_check_step_takes_the_reference_then_marks_an_unstable_step() -> None:
    client = _Client()
    check = _stability_check(client)
    row: dict[str, Any] = {"status": "ok", "narr_tps": 40.0, "tps_u95_pct": 1.0}
    assert _marked(check, row)[0] is None and row["answers_differ"] == 0
    client.corrupt = True
    row = {"status": "ok", "narr_tps": 40.0, "tps_u95_pct": 1.0}
    error, faults, said = _marked(check, row)
    assert error is None and row["status"] == "unstable" and row["answers_differ"] == 3
    assert "differs" in row["error"] and any("unstable" in s for s in said)
    assert [f["kind"] for f in faults.to_list()] == ["unstable_offset"]


def test_check_step_fails_a_reference_it_cannot_take_and_keeps_the_row() -> None:
    client = _Client()
    client.flaky = True
    row: dict[str, Any] = {"status": "ok", "narr_tps": 40.0}
    error, _, _ = _marked(_stability_check(client), row)
    assert isinstance(error, PowersweepError) and row["status"] == "failed"


def test_a_reset_card_is_waited_for_and_the_wait_is_bounded() -> None:
    clock = _Clock()
    card = _Card(clock)
    check = _stability_check(_Client(), card)
    _ref(check)
    card.lost, card.offset, card.back_at = True, 0.0, clock.t + 7.0
    row: dict[str, Any] = {"status": "failed", "error": "x" * 500, "narr_tps": None}
    error, faults, said = _marked(check, row)
    assert error is None and row["status"] == "unstable"
    assert clock.t >= card.back_at and any("came back after 7 s" in s for s in said)
    assert "gpu_reset" in [f["kind"] for f in faults.to_list()]
    assert "x" * 200 not in row["error"]  # the measurement's error is quoted, not repeated
    card.lost, card.back_at = True, float("inf")
    row = {"status": "ok", "narr_tps": 40.0}
    error, _, _ = _marked(check, row)
    assert isinstance(error, PowersweepError) and "did not come back" in str(error)
    assert clock.t - card.back_at < 0 and row["status"] == "unstable"


def test_xids_the_driver_reports_make_a_step_unstable() -> None:
    client, card = _Client(), _Card()
    check = _stability_check(client, card)
    assert check.xids_readable == [True]
    _ref(check)
    card.xids = [13]
    verdict = _check_step(check)
    assert not verdict.stable and not verdict.reset
    assert verdict.problems[0] == "GPU 0 reported Xid 13 (graphics engine exception)"
    card.xids = [79, 999]
    verdict = _check_step(check)
    assert verdict.reset and "Xid 79 (fallen off the bus), Xid 999" in verdict.problems[0]
    assert _check_step(check).stable  # each Xid is reported once


def test_an_xid_at_offset_zero_stops_the_search() -> None:
    card = _Card()
    check = _stability_check(_Client(), card)
    card.xids = [48]
    with pytest.raises(PowersweepError, match=r"double-bit ECC error.*at offset 0"):
        _ref(check)


def test_a_backend_without_xids_is_checked_without_them() -> None:
    card = _Card()
    card.xids = None
    check = _stability_check(_Client(), card)
    assert check.xids_readable == [False]
    _ref(check)
    assert _check_step(check).stable


def test_the_prefill_probe_is_fitted_by_the_servers_tokenizer() -> None:
    class Counting(_Client):
        def __init__(self, chars_per_token: float | None) -> None:
            super().__init__()
            self.chars_per_token = chars_per_token
            self.counted = 0

        async def count_tokens(self, text: str) -> int | None:
            self.counted += 1
            return None if self.chars_per_token is None else int(len(text) / self.chars_per_token)

    estimate = probes(4096)[2].prompt
    # a tokenizer of one token per character: the prompt shrinks to fit half the context
    byte_level = Counting(1.0)
    fitted = asyncio.run(fitted_probes(byte_level, 4096))
    assert len(fitted[2].prompt) <= 2048 + 100 and byte_level.counted <= 2
    # ~4 characters a token, or no tokenizer to ask: the estimate stands
    assert asyncio.run(fitted_probes(Counting(4.2), 4096))[2].prompt == estimate
    assert asyncio.run(fitted_probes(Counting(None), 4096))[2].prompt == estimate
    assert asyncio.run(fitted_probes(_Client(), 4096))[2].prompt == estimate
    # no tokenizer: a short request's usage gives the characters per token
    byte_usage = _Client()
    byte_usage.prompt_tokens = len(NARRATIVE_PROMPT)  # one token per character
    fitted = asyncio.run(fitted_probes(byte_usage, 4096))
    assert len(fitted[2].prompt) <= 2048 + 100


def test_without_a_card_driven_tps_a_slower_step_is_no_stretching() -> None:
    check = StabilityCheck(_Client(), [_Card()], _Clock(), check_stretch=False)  # type: ignore[list-item,arg-type]
    _ref(check, tps=40.0, u95=1.0)
    assert _check_step(check, {"status": "ok", "narr_tps": 30.0, "tps_u95_pct": 1.0}).stable


def test_a_failure_the_world_may_cause_is_marked_for_a_retry() -> None:
    # issue 45: TPS down at the locked clock with the answers identical, or a measurement the
    # server failed with the card fine, may be the world's: the search measures it once more
    client = _Client()
    check = _stability_check(client)
    _ref(check)
    stretched = _check_step(check, {"status": "ok", "narr_tps": 30.0, "tps_u95_pct": 1.0})
    assert not stretched.stable and stretched.retry == "stretch"
    failed = _check_step(check, {"status": "failed", "error": "HTTP 503 from the server"})
    assert not failed.stable and failed.retry == "server"
    client.corrupt = True
    both = _check_step(check, {"status": "ok", "narr_tps": 30.0, "tps_u95_pct": 1.0})
    assert not both.stable and both.retry == ""  # an answer differs: the offset's
    client.corrupt = False
    client.fail = "CUDA error: an illegal memory access was encountered"
    cuda = _check_step(check)
    assert not cuda.stable and cuda.retry == ""  # the card failed under the server


def test_offset_zero_read_again_rebases_the_reference_tps() -> None:
    client, card = _Client(), _Card()
    check = _stability_check(client, card)
    _ref(check, tps=40.0)
    zero = SweepPoint(POINT.cap_w, POINT.sm_lock_mhz, None, 0.0)
    slower = {"status": "ok", "narr_tps": 30.0, "tps_u95_pct": 1.0}
    card.offset = 0.0
    verdict = asyncio.run(check.check(zero, slower, 0))
    assert verdict.stable  # the card's own curve, as the world is now
    assert check.reference_tps == (30.0, 1.0)
    card.offset = 60.0
    assert _check_step(check, {"status": "ok", "narr_tps": 30.0, "tps_u95_pct": 1.0}).stable
