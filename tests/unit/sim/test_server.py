"""powersweep.sim.server: the simulated server's chat endpoint, answered in process (httpx over
its ASGI app, a constant engine on a clock 1,000 times faster than the wall: no socket). Each
flavour's defaults, the requests it refuses and in what words, an over-long prompt Ollama keeps
the tail of, the thinking switch, the requests counted, and the faults a request meets: busy
answers, a fault once, at one cap or its first visit, or after a time. Greedy requests (temperature
0) get the answer their prompt and seed decide, streamed or not, diverged while the engine reports
an unstable card; a card off the bus fails the requests that arrive, one that resets those in
flight."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx
import pytest

from powersweep.clock import ScaledClock
from powersweep.sim import faults
from powersweep.sim.engine import ConstantEngine
from powersweep.sim.faults import parse_fault
from powersweep.sim.server import FLAVOURS, SimServer
from powersweep.sim.virtual_time import VirtualClock

CONTEXT = 4096
HELLO = [{"role": "user", "content": "Say hello."}]


def _sim_server(**kw: Any) -> SimServer:
    engine = ConstantEngine(
        ScaledClock(1000.0), decode_tps=100.0, prefill_tps=50_000.0, context_tokens=CONTEXT
    )
    return SimServer(engine, **kw)


def _post(server: SimServer, *bodies: Any) -> list[httpx.Response]:
    """Each body posted to /v1/chat/completions in turn (a dict as JSON, bytes as they are), on
    the virtual loop of a server on virtual time."""

    async def run() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=server.app())
        async with httpx.AsyncClient(transport=transport, base_url="http://sim") as client:
            out = []
            for body in bodies:
                if isinstance(body, bytes):
                    out.append(await client.post("/v1/chat/completions", content=body))
                else:
                    out.append(await client.post("/v1/chat/completions", json=body))
            return out

    clock = server.engine.clock
    if isinstance(clock, VirtualClock):
        with asyncio.Runner(loop_factory=clock.loop_factory) as runner:
            return runner.run(run())
    return asyncio.run(run())


def _chat_body(max_tokens: int = 4, **extra: Any) -> dict[str, Any]:
    return {"messages": HELLO, "max_tokens": max_tokens, **extra}


def _error_message(response: httpx.Response) -> str:
    return str(response.json()["error"]["message"])


def test_each_flavour_has_its_defaults() -> None:
    llama, vllm, plain = (_sim_server(flavour=f) for f in ("llamacpp", "vllm", "plain"))
    assert llama.total_slots == 4 and vllm.total_slots is None
    assert _sim_server(flavour="vllm", total_slots=8).total_slots == 8
    assert plain.rejected_keys == ("chat_template_kwargs",) and llama.rejected_keys == ()
    odd = _sim_server(reasoning_tokens=-3, tokens_per_chunk=0, token_jitter_fraction=-1.0)
    assert (odd.reasoning_tokens, odd.tokens_per_chunk, odd.token_jitter_fraction) == (0, 1, 0.0)
    assert llama.url == "" and FLAVOURS == ("llamacpp", "vllm", "sglang", "ollama", "plain")
    llama.stop()  # never started: nothing to stop, no error
    with pytest.raises(ValueError, match=r"unknown flavour 'tgi'; expected one of \('llamacpp'"):
        _sim_server(flavour="tgi")


def test_a_virtual_time_server_stamps_its_chunks_with_a_fixed_epoch() -> None:
    engine = ConstantEngine(VirtualClock())
    assert SimServer(engine).created == 1_767_225_600
    assert abs(_sim_server().created - time.time()) < 60  # a scaled clock's chunks: the wall's


def test_a_whole_answer_has_the_tokens_asked_for_and_counts_the_request() -> None:
    server = _sim_server(flavour="vllm")
    (response,) = _post(server, _chat_body(5))
    body = response.json()
    assert response.status_code == 200 and body["object"] == "chat.completion"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 5 and body["usage"]["prompt_tokens"] == 4
    assert len(body["choices"][0]["message"]["content"].split()) == 5
    assert server.requests_total == 1 and server.tokens_generated == 5


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        (b"[1, 2]", 400, "request body is not a JSON object"),
        (b"{not json", 400, "request body is not a JSON object"),
        ({"messages": []}, 400, "'messages' must be a non-empty list"),
        ({"messages": "hi"}, 400, "'messages' must be a non-empty list"),
        ({"messages": HELLO, "max_tokens": 0}, 400, "max_tokens must be a positive integer"),
    ],
)
def test_a_malformed_request_is_refused_and_not_counted(
    body: Any, status: int, message: str
) -> None:
    server = _sim_server()
    (response,) = _post(server, body)
    assert response.status_code == status and _error_message(response) == message
    assert server.requests_total == 0


def test_a_strict_server_refuses_keys_it_does_not_know_with_422() -> None:
    server = _sim_server(flavour="plain")
    kwargs = {"chat_template_kwargs": {"enable_thinking": False}}
    (response,) = _post(server, _chat_body(**kwargs))
    assert response.status_code == 422
    assert response.json() == {
        "detail": [
            {
                "type": "extra_forbidden",
                "loc": ["body", "chat_template_kwargs"],
                "msg": "Extra inputs are not permitted",
            }
        ]
    }
    ok, refused = _post(_sim_server(rejected_keys=("seed",)), _chat_body(), _chat_body(seed=1))
    assert ok.status_code == 200 and refused.status_code == 422


def test_an_http_error_answers_every_chat_request() -> None:
    server = _sim_server(http_error=503)
    responses = _post(server, _chat_body(), b"junk")
    assert [r.status_code for r in responses] == [503, 503]
    assert _error_message(responses[0]) == "simulated HTTP 503"


def test_a_prompt_over_the_context_is_refused_but_ollama_keeps_its_tail() -> None:
    long = [{"role": "user", "content": "word " * (CONTEXT + 100)}]
    (refused,) = _post(_sim_server(flavour="vllm"), {"messages": long, "max_tokens": 4})
    assert refused.status_code == 400
    ollama = _sim_server(flavour="ollama")
    (kept,) = _post(ollama, {"messages": long, "max_tokens": 4})
    assert kept.status_code == 200 and kept.json()["usage"]["prompt_tokens"] == CONTEXT


def _reasoning_deltas(response: httpx.Response) -> list[dict[str, Any]]:
    events = [
        e.removeprefix("data: ") for e in response.text.split("\n\n") if e.startswith("data: {")
    ]
    deltas = [c["delta"] for e in events for c in json.loads(e)["choices"]]
    return [d for d in deltas if "reasoning_content" in d or "reasoning" in d]


def test_the_thinking_switch_turns_reasoning_off_except_on_ollama() -> None:
    off = _chat_body(6, stream=True, chat_template_kwargs={"enable_thinking": False})
    on = _chat_body(6, stream=True)
    think_off, think_on = _post(_sim_server(reasoning_tokens=3), off, on)
    assert _reasoning_deltas(think_off) == [] and len(_reasoning_deltas(think_on)) == 3
    (ollama,) = _post(_sim_server(flavour="ollama", reasoning_tokens=3), off)
    assert len(_reasoning_deltas(ollama)) == 3  # Ollama ignores the switch


def test_a_busy_server_answers_its_first_requests_503_with_a_retry_after() -> None:
    server = _sim_server(fault=parse_fault("busy"))
    responses = _post(server, *([_chat_body()] * (faults.BUSY_ANSWERS + 1)))
    assert [r.status_code for r in responses] == [503] * faults.BUSY_ANSWERS + [200]
    assert responses[0].headers["retry-after"] == "0.001"  # one run second, in wall seconds
    assert _error_message(responses[0]) == "Loading model"
    assert server.requests_total == 1


def _usage_tokens(response: httpx.Response) -> int:
    return int(response.json()["usage"]["completion_tokens"])


def test_a_fault_once_meets_only_the_first_request() -> None:
    server = _sim_server(fault=parse_fault("inflated-usage-once"))
    first, second = _post(server, _chat_body(4), _chat_body(4))
    assert _usage_tokens(first) == 4 * faults.INFLATE_FACTOR and _usage_tokens(second) == 4


def test_a_fault_at_a_cap_meets_only_the_requests_served_at_that_cap() -> None:
    cap = {"w": 300.0}
    server = _sim_server(fault=parse_fault("inflated-usage@300"), current_cap_w=lambda: cap["w"])
    at_cap = _post(server, _chat_body(4))[0]
    cap["w"] = 250.0
    elsewhere = _post(server, _chat_body(4))[0]
    cap["w"] = 300.0
    again = _post(server, _chat_body(4))[0]
    assert [_usage_tokens(r) for r in (at_cap, elsewhere, again)] == [200, 4, 200]
    blind = _sim_server(fault=parse_fault("inflated-usage@300"))  # the cap cannot be read
    assert _usage_tokens(_post(blind, _chat_body(4))[0]) == 4


def test_a_fault_of_the_first_visit_spares_the_cap_measured_again() -> None:
    cap = {"w": 300.0}
    server = _sim_server(
        fault=parse_fault("inflated-usage-first@300"), current_cap_w=lambda: cap["w"]
    )
    first = _post(server, _chat_body(4), _chat_body(4))
    cap["w"] = 250.0
    _post(server, _chat_body(4))
    cap["w"] = 300.0
    later = _post(server, _chat_body(4))[0]
    assert [_usage_tokens(r) for r in first] == [200, 200] and _usage_tokens(later) == 4


def test_a_fault_after_a_time_spares_the_requests_before_it() -> None:
    server = _sim_server(fault=parse_fault("inflated-usage@+1000000"))
    assert _usage_tokens(_post(server, _chat_body(4))[0]) == 4
    soon = _sim_server(fault=parse_fault("inflated-usage@+0"))
    assert _usage_tokens(_post(soon, _chat_body(4))[0]) == 200


# --- greedy answers and an unstable or reset card (issue 36) --------------------------------


def _greedy(n: int = 12, prompt: str = "What is 2+2?", **extra: Any) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": n,
        "temperature": 0,
        "seed": 11,
        **extra,
    }


def _answer_text(response: httpx.Response) -> str:
    """The answer's text, streamed (its content deltas) or whole."""
    assert response.status_code == 200
    if response.headers["content-type"].startswith("text/event-stream"):
        events = [e.removeprefix("data: ") for e in response.text.split("\n\n")]
        chunks = [json.loads(e) for e in events if e.startswith("{")]
        assert not any("error" in c for c in chunks)
        return "".join(
            c["delta"].get("content") or "" for chunk in chunks for c in chunk.get("choices", [])
        )
    return str(response.json()["choices"][0]["message"]["content"])


def test_a_greedy_answer_is_the_prompts_streamed_or_not_whatever_the_request_or_server() -> None:
    one, other = _sim_server(seed=1), _sim_server(seed=2, flavour="vllm", tokens_per_chunk=3)
    texts = [
        _answer_text(r)
        for r in _post(one, _greedy(), _greedy(stream=True), _greedy(temperature=0.0))
    ]
    texts += [_answer_text(r) for r in _post(other, _greedy(stream=True), _greedy())]
    assert len(set(texts)) == 1 and len(texts[0].split()) == 12
    # a shorter limit: the start of the same answer
    (short,) = _post(one, _greedy(5, stream=True))
    assert _answer_text(short).split() == texts[0].split()[:5]
    # another prompt or seed: another answer; no seed is seed 0
    changed = _post(one, _greedy(prompt="What is 2+3?"), _greedy(seed=12), _greedy(seed=None))
    no_seed = _greedy()
    del no_seed["seed"]
    (seed_zero, absent) = _post(one, _greedy(seed=0), no_seed)
    assert len({texts[0], *(_answer_text(r) for r in changed)}) == 4
    assert _answer_text(seed_zero) == _answer_text(absent) == _answer_text(changed[2])


def test_a_sampled_answer_is_still_the_request_numbers() -> None:
    warm = _greedy(temperature=0.7)
    first, second = _post(_sim_server(seed=1), warm, warm)
    assert _answer_text(first) != _answer_text(second)
    again = _post(_sim_server(seed=1), warm)[0]
    assert _answer_text(again) == _answer_text(first)  # the same server seed and request number


def test_greedy_answers_diverge_exactly_while_the_engine_is_unstable() -> None:
    server = _sim_server()
    prompts = [f"Question {i}: what is {i} squared?" for i in range(8)]
    asks = [
        _greedy(n, prompt=p) for n, p in zip((2, 3, 5, 8, 12, 20, 40, 64), prompts, strict=True)
    ]
    stable = [_answer_text(r) for r in _post(server, *asks)]
    engine = server.engine
    assert isinstance(engine, ConstantEngine)
    engine.instability_mhz_now = 0.5
    wrong = [_answer_text(r) for r in _post(server, *asks)]
    wrong_streamed = [_answer_text(r) for r in _post(server, *(dict(a, stream=True) for a in asks))]
    assert all(w != s for w, s in zip(wrong, stable, strict=True))
    assert wrong_streamed == wrong  # the same wrong answer, streamed or not
    # a sampled request is no check of the card: its text does not change
    warm = _greedy(temperature=0.7)
    engine.instability_mhz_now = 0.0
    plain = _post(_sim_server(), warm)[0]
    engine.instability_mhz_now = 0.5
    assert _answer_text(_post(_sim_server(), warm)[0]) == _answer_text(plain)
    shaky = _sim_server()
    shaky.engine.instability_mhz_now = 0.5  # type: ignore[attr-defined]
    assert _answer_text(_post(shaky, warm)[0]) == _answer_text(plain)
    engine.instability_mhz_now = 0.0  # stable again: the stable answers again
    assert [_answer_text(r) for r in _post(server, *asks)] == stable


def _last_event(response: httpx.Response) -> dict[str, Any]:
    events = [e for e in response.text.split("\n\n") if e.startswith("data: ")]
    return dict(json.loads(events[-1].removeprefix("data: ")))


LOST = {
    "error": {
        "code": 500,
        "message": "CUDA error: an illegal memory access was encountered",
        "type": "server_error",
    }
}


def test_requests_arriving_while_a_card_is_off_the_bus_fail_with_a_cuda_error() -> None:
    server = _sim_server()
    engine = server.engine
    assert isinstance(engine, ConstantEngine)
    engine.off_bus_now = True
    whole, streamed = _post(server, _greedy(), _greedy(stream=True, temperature=0.7))
    assert whole.status_code == 500 and whole.json() == LOST
    assert streamed.status_code == 200 and _last_event(streamed) == LOST
    assert server.requests_total == 2 and server.tokens_generated == 0
    assert engine.peak_active == {"decode": 0, "prefill": 0}  # nothing ran on the card
    engine.off_bus_now = False
    assert [r.status_code for r in _post(server, _greedy(), _greedy(stream=True))] == [200, 200]


class _ResettingEngine(ConstantEngine):
    """A card that resets while the request decodes, at its ``at``-th rate asked (on virtual
    time, so each token falls due on its own and the reset between two of them)."""

    def __init__(self, at: int) -> None:
        super().__init__(VirtualClock(), decode_tps=100.0, prefill_tps=50_000.0)
        self.at = at
        self.asked = 0

    def decode_rate_tps(self) -> float:
        self.asked += 1
        if self.asked == self.at:
            self.resets_so_far += 1
        return super().decode_rate_tps()


@pytest.mark.parametrize("stream", [True, False])
def test_a_card_that_resets_fails_the_requests_in_flight(stream: bool) -> None:
    engine = _ResettingEngine(at=4)
    server = SimServer(engine, flavour="vllm")
    (lost,) = _post(server, _greedy(12, stream=stream))
    if stream:
        assert lost.status_code == 200 and _last_event(lost) == LOST
        assert lost.text.count('"content":"') == 3  # the tokens before the reset went out
    else:
        assert lost.status_code == 500 and lost.json() == LOST
    assert engine.active == {"decode": 0, "prefill": 0}  # its work ended with it
    # the next request sees no new reset: it is served
    assert _answer_text(_post(server, _greedy(12, stream=stream))[0])
