"""powersweep.sim.sim_rig: the simulated rig as a GPU backend and as the engine the simulated
server asks for token rates (which cards serve, what load each request puts on them), whether its
serving cards compute right or reset (issue 36: an undervolt search against the simulated server,
end to end), and the simulator's own noise-free answers (``ground_truth``,
``clock_ground_truth``, each card's stable offset margin)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import httpx
import pytest

from powersweep.clock import ManualClock
from powersweep.errors import UsageError
from powersweep.sim.physics import Workload, steady_state
from powersweep.sim.profiles import get_profile
from powersweep.sim.server import SimServer
from powersweep.sim.sim_rig import (
    LONG_PROMPT_TOKENS,
    MIN_PLATEAU_CAPS,
    SimRig,
    clock_ground_truth,
    ground_truth,
    workload_for,
)
from powersweep.sim.vf_stability import RESET_OFF_BUS_S
from powersweep.sim.virtual_time import VirtualClock
from powersweep.sweep.gpu import CLOCK_EVENT_GPU_IDLE

R3090 = get_profile("rtx3090-air")
H100 = get_profile("h100-sxm")


def _sim_rig(n: int = 1, **kwargs: object) -> tuple[ManualClock, SimRig]:
    clock = ManualClock()
    return clock, SimRig([R3090] * n, clock, **kwargs)  # type: ignore[arg-type]


def test_a_rig_needs_a_profile_and_serving_cards_it_has() -> None:
    with pytest.raises(UsageError, match="needs at least one GPU profile"):
        SimRig([], ManualClock())
    with pytest.raises(UsageError, match=r"--sim-serving-gpus: the rig has GPUs 0-1, not \[2\]"):
        SimRig([R3090, R3090], ManualClock(), serving=(0, 2))
    with pytest.raises(UsageError, match="the rig has GPUs 0-1, not none"):
        SimRig([R3090, R3090], ManualClock(), serving=())


def test_backend_lists_its_cards_and_refuses_one_it_lacks() -> None:
    _, rig = _sim_rig(2, serving=(1, 1))
    assert rig.device_count() == 2
    assert rig.serving == (1,)  # a repeated index counts once
    assert [rig.gpu(i).index for i in range(2)] == [0, 1]
    with pytest.raises(UsageError, match=r"GPU 2 does not exist \(the rig has 2\)"):
        rig.gpu(2)
    with pytest.raises(UsageError, match="GPU -1 does not exist"):
        rig.gpu(-1)


def test_context_is_the_smallest_cards() -> None:
    clock = ManualClock()
    rig = SimRig([H100, R3090], clock)
    assert rig.context_tokens == min(H100.context_tokens, R3090.context_tokens) == 32768
    assert rig.clock is clock


def test_only_serving_cards_load_up_while_a_request_decodes() -> None:
    clock, rig = _sim_rig(2, serving=(0,))
    rig.work_started("decode")
    clock.advance(5.0)
    serving, idle = rig.gpu(0).read_sample(), rig.gpu(1).read_sample()
    assert serving.clock_event_bits & CLOCK_EVENT_GPU_IDLE == 0 and serving.util_pct > 90
    assert idle.clock_event_bits == CLOCK_EVENT_GPU_IDLE and idle.util_pct == 0
    assert rig.gpu(1).compute_processes() == ()
    rig.work_finished("decode")
    rig.work_finished("decode")  # one more than started: the count stays at zero
    clock.advance(5.0)
    assert rig.gpu(0).read_sample().clock_event_bits == CLOCK_EVENT_GPU_IDLE
    rig.work_started("decode")
    assert rig.decode_rate_tps() == pytest.approx(rig.gpu(0).rate_tps(Workload("decode")))


def test_decode_rate_is_per_stream_and_shares_the_batch() -> None:
    _, rig = _sim_rig()
    rig.work_started("decode")
    one = rig.decode_rate_tps()
    for _ in range(3):
        rig.work_started("decode")
    four = rig.decode_rate_tps()
    assert four < one < 4 * four  # each stream slower, together faster


def test_a_long_prompt_loads_the_card_as_prefill_a_short_one_rides_with_decode() -> None:
    clock, rig = _sim_rig()
    rig.work_started("decode")
    rig.work_started("prefill")
    rig.prefill_rate_tps(LONG_PROMPT_TOKENS - 1)
    clock.advance(0.5)
    decode_only = rig.gpu(0).rate_tps()
    assert decode_only == pytest.approx(rig.gpu(0).rate_tps(Workload("decode")))
    rate = rig.prefill_rate_tps(8000)  # a long prompt: the card now runs the prefill
    assert rig.gpu(0).rate_tps() == pytest.approx(rate)
    rig.work_finished("prefill")
    assert rig.gpu(0).rate_tps() == pytest.approx(decode_only)  # back to the decode


def test_concurrent_prefills_share_the_card() -> None:
    _, rig = _sim_rig()
    rig.work_started("prefill")
    alone = rig.prefill_rate_tps(8000)
    rig.work_started("prefill")
    assert rig.prefill_rate_tps(8000) == pytest.approx(alone / 2)


def test_preheat_puts_serving_cards_at_their_steady_temperature() -> None:
    _, rig = _sim_rig(2, serving=(0,))
    rig.gpu(0).set_power_limit(300.0)
    cold = rig.gpu(1).temp_c
    rig.preheat("decode-single")
    _, steady, _ = steady_state(R3090, Workload("decode", share=1.0), 300.0)
    assert rig.gpu(0).temp_c == pytest.approx(steady)
    assert rig.gpu(1).temp_c == pytest.approx(cold)


def test_the_engine_reports_the_worst_serving_cards_instability_and_resets() -> None:
    clock, rig = _sim_rig(3, serving=(0, 1), vf_reset_beyond_mhz=20.0)
    assert rig.vf_reset_beyond_mhz == 20.0
    margins = rig.truth_stable_offsets_mhz()
    assert margins == {
        0: rig.gpus[0].truth_stable_offset_mhz,
        1: rig.gpus[1].truth_stable_offset_mhz,
    }
    assert (rig.instability_mhz(), rig.reset_count(), rig.off_bus()) == (0.0, 0, False)
    rig.gpus[0].set_sm_clock_offset(margins[0] + 5.0)
    rig.gpus[1].set_sm_clock_offset(margins[1] + 15.0)
    rig.gpus[2].set_sm_clock_offset(1000.0)  # not serving: neither checked nor ever loaded
    assert rig.instability_mhz() == 15.0
    rig.work_started("decode")  # under the threshold: wrong answers, no reset
    assert rig.reset_count() == 0 and not rig.off_bus()
    rig.gpus[1].set_sm_clock_offset(margins[1] + 25.0)  # past it, under load: card 1 resets
    assert rig.reset_count() == 1 and rig.off_bus() and rig.gpus[1].sm_offset_mhz == 0.0
    assert rig.instability_mhz() == 5.0  # card 0 still runs past its margin
    assert rig.gpus[2].resets == 0 and rig.gpus[2].sm_offset_mhz == 1000.0
    clock.advance(RESET_OFF_BUS_S)
    assert not rig.off_bus() and rig.reset_count() == 1


def test_workload_of_each_load_mode() -> None:
    assert workload_for("decode-single", concurrency=8) == Workload("decode", batch=1)
    assert workload_for("decode-concurrent", concurrency=8) == Workload("decode", batch=8)
    assert workload_for("decode-concurrent", concurrency=0) == Workload("decode", batch=1)
    assert workload_for("prefill-heavy", prompt_tokens=4000) == Workload(
        "prefill", prompt_tokens=4000
    )
    with pytest.raises(UsageError, match="unknown load mode 'decode-everything'"):
        workload_for("decode-everything")


def test_truth_is_one_row_per_distinct_cap_ascending_with_its_best() -> None:
    truth = ground_truth([R3090], "decode-single", [300.0, 200.0, 250.0, 300.0])
    assert [c.cap_w for c in truth.caps] == [200.0, 250.0, 300.0]
    best = max(truth.caps, key=lambda c: c.tps_per_w)
    assert truth.sweet_spot_cap_w == best.cap_w
    assert truth.sweet_spot_tps_per_w == best.tps_per_w
    for c in truth.caps:
        assert c.tps_per_w == pytest.approx(c.tps / c.power_w)
        assert c.j_per_token == pytest.approx(c.power_w / c.tps)
        assert c.itl_ms == pytest.approx(1000.0 / c.tps)  # one stream
    assert truth.cap(250.0).cap_w == 250.0
    with pytest.raises(KeyError):
        truth.cap(260.0)
    data = truth.to_dict()
    assert data["sweet_spot"] == {"cap_w": best.cap_w, "tps_per_w": best.tps_per_w}
    assert (data["load_mode"], data["concurrency"], data["prompt_tokens"]) == (
        "decode-single",
        1,
        None,
    )
    assert data["caps"][0]["cap_w"] == 200.0 and set(data["caps"][0]) >= {"regime", "temp_c"}


def test_two_cards_draw_twice_and_run_at_the_slower_ones_rate() -> None:
    one = ground_truth([R3090], "decode-single", [300.0]).caps[0]
    two = ground_truth([R3090, R3090], "decode-single", [300.0]).caps[0]
    assert two.power_w > one.power_w  # the draw is summed over the cards
    assert two.tps > one.tps  # each card holds half the model


def test_prefill_truth_holds_one_decode_step_and_has_no_inter_token_gap() -> None:
    truth = ground_truth([R3090], "prefill-heavy", [300.0], prompt_tokens=4000)
    (cap,) = truth.caps
    op, _, _ = steady_state(R3090, Workload("prefill", prompt_tokens=4000), 300.0)
    assert cap.tps < op.rate_tps  # the first token's decode step is in the measured time
    assert math.isnan(cap.itl_ms)
    assert (truth.concurrency, truth.prompt_tokens) == (1, 4000)


def test_concurrent_truth_counts_all_streams() -> None:
    truth = ground_truth([R3090], "decode-concurrent", [300.0], concurrency=4)
    assert truth.concurrency == 4
    (cap,) = truth.caps
    assert cap.itl_ms == pytest.approx(4000.0 / cap.tps)


def test_a_draw_ceiling_is_a_plateau_of_the_caps_held_at_one_clock_up_to_the_top() -> None:
    caps = [350.0 + 25.0 * i for i in range(15)]
    truth = ground_truth([H100], "decode-single", caps)
    (plateau,) = truth.plateaus
    assert plateau["kind"] == "draw_ceiling"
    assert (plateau["start_w"], plateau["end_w"]) == (350.0, 700.0)
    assert plateau["power_w"] == pytest.approx(truth.caps[7].power_w, abs=0.01)  # the median
    # fewer caps than a plateau needs: none
    short = ground_truth([H100], "decode-single", caps[-(MIN_PLATEAU_CAPS - 1) :])
    assert short.plateaus == []


def test_clock_truth_finds_the_peak_the_pareto_front_and_the_tiers() -> None:
    p5090 = get_profile("rtx5090-air")
    points = [(None, None), (1500.0, None), (1500.0, 7200.0), (2000.0, 14001.0)]
    truth = clock_ground_truth([p5090], "decode-single", points, 575.0)
    rows = truth["points"]
    assert [(r["sm_lock_mhz"], r["mem_lock_mhz"]) for r in rows] == points
    best = max(rows, key=lambda r: r["tps_per_w"])
    assert truth["peak"]["tps_per_w"] == best["tps_per_w"]
    # the front: ascending draw and TPS, no point beaten on both
    front = truth["pareto"]
    assert [f["power_w"] for f in front] == sorted(f["power_w"] for f in front)
    assert [f["tps"] for f in front] == sorted(f["tps"] for f in front)
    for r in rows:
        on_front = any(
            (f["sm_lock_mhz"], f["mem_lock_mhz"]) == (r["sm_lock_mhz"], r["mem_lock_mhz"])
            for f in front
        )
        beaten = any(
            o["tps"] >= r["tps"] and o["power_w"] < r["power_w"] for o in rows if o is not r
        )
        assert on_front != beaten
    # a memory lock runs at the nearest tier: 7200 runs at 7001 and caps TPS
    slow = next(r for r in rows if r["mem_lock_mhz"] == 7200.0)
    assert slow["tps"] < rows[1]["tps"]
    tiers = {t["mem_lock_mhz"]: t for t in truth["tiers"]}
    assert tiers[7200.0]["caps_tps"] is True and tiers[None]["caps_tps"] is False
    assert [t["mem_lock_mhz"] for t in truth["tiers"]] == [14001.0, 7200.0, None]
    assert truth["default_limit_w"] == 575.0
    assert truth["unlocked_power_w"] == pytest.approx(rows[0]["power_w"])


# --- an undervolt search against the simulated server (issue 36) ---------------------------


def test_greedy_answers_go_wrong_past_the_margin_and_fail_across_a_reset() -> None:
    clock = VirtualClock()
    rig = SimRig([R3090], clock, seed=1)
    gpu = rig.gpus[0]
    server = SimServer(rig, seed=1)
    margin = gpu.truth_stable_offset_mhz
    lost = "CUDA error: an illegal memory access was encountered"

    async def search() -> dict[str, Any]:
        transport = httpx.ASGITransport(app=server.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:

            async def ask(stream: bool = False) -> httpx.Response:
                body = {
                    "messages": [{"role": "user", "content": "Name the planets."}],
                    "max_tokens": 16,
                    "temperature": 0,
                    "seed": 1,
                    "stream": stream,
                }
                return await client.post("/v1/chat/completions", json=body)

            out: dict[str, Any] = {"stable": (await ask()).json()}
            assert gpu.lock_sm_clock(1560.0).accepted
            assert gpu.set_sm_clock_offset(margin).accepted
            out["at_margin"] = (await ask()).json()
            assert gpu.set_sm_clock_offset(margin + 30.0).accepted
            out["past_margin"] = (await ask()).json()
            assert gpu.set_sm_clock_offset(margin + 80.0).accepted  # idle: it holds, for now
            out["reset"] = await ask(stream=True)
            out["after"] = (gpu.sm_offset_mhz, gpu.locks.sm_mhz, gpu.resets, rig.off_bus())
            out["off_bus"] = await ask()
            await clock.asleep(RESET_OFF_BUS_S)
            out["back"] = (await ask()).json()
            return out

    with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
        out = runner.run(search())

    def text(body: dict[str, Any]) -> str:
        return str(body["choices"][0]["message"]["content"])

    assert text(out["at_margin"]) == text(out["stable"])  # at its margin the card computes right
    assert text(out["past_margin"]) != text(out["stable"])
    assert gpu.resets == 1
    events = [e for e in out["reset"].text.split("\n\n") if e.startswith("data: ")]
    assert events[-1] == (
        'data: {"error": {"code": 500, "message": "' + lost + '", "type": "server_error"}}'
    )
    assert out["after"] == (0.0, None, 1, True)
    assert out["off_bus"].status_code == 500 and out["off_bus"].json()["error"]["message"] == lost
    assert text(out["back"]) == text(out["stable"])  # back at offset 0, stable
    assert not rig.off_bus() and gpu.resets == 1
