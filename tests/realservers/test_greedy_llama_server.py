"""The undervolt search's stability check against llama.cpp's real ``llama-server``: its greedy
answers repeat token for token (the reference holds on a real server, so a difference would be
the card's), and an undervolt session runs its whole path against it (the GPU simulated, whose
offsets cannot change a real server's answers: every step holds)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from powersweep.cli.rigs import build_rig
from powersweep.clock import real_clock
from powersweep.sweep.measurement.stability import GREEDY_SEED, StabilityCheck, probes
from powersweep.sweep.options import Axis, PointOptions, UndervoltOptions
from powersweep.sweep.server.client import ChatClient
from powersweep.sweep.server.discovery import discover_server
from powersweep.sweep.session import run_session
from tests.integration.conftest import read_json
from tests.realservers.conftest import RealServer, sweep_options

pytestmark = pytest.mark.realserver


@pytest.fixture(params=["llama_server", "llama_cpp_python_server"])
def server(request: pytest.FixtureRequest) -> RealServer:
    """llama.cpp's own server, and llama-cpp-python's (another OpenAI front end to it)."""
    found: RealServer = request.getfixturevalue(request.param)
    return found


def test_greedy_probes_repeat_and_the_reference_holds(server: RealServer) -> None:
    async def go() -> tuple[list[str], StabilityCheck]:
        info = await discover_server(server.url, model=None, api_key=None, clock=real_clock())
        async with ChatClient(info, real_clock()) as client:
            texts = []
            for probe in probes(info.context_tokens)[:2]:
                answer = await client.greedy(probe.prompt, max_tokens=24, seed=GREEDY_SEED)
                assert answer.ok, answer.error
                assert answer.completion_tokens == 24
                again = await client.greedy(probe.prompt, max_tokens=24, seed=GREEDY_SEED)
                assert again.text == answer.text
                texts.append(answer.text)
            check = StabilityCheck(client, [], real_clock(), context_tokens=info.context_tokens)
            verdict = await check.take_reference({"narr_tps": 10.0, "tps_u95_pct": 1.0})
            assert verdict.stable and verdict.checked == 6
            return texts, check

    texts, check = asyncio.run(go())
    assert all(texts)
    # where the server can count tokens, the prefill probe was sized by its tokenizer to fit
    # half its context (this tiny model's makes far more than one token of four characters)
    assert len(check.probes[2].prompt) <= len(probes(4096)[2].prompt)


def test_an_undervolt_session_runs_against_a_real_server(
    llama_server: RealServer, tmp_path: Path
) -> None:
    options = sweep_options(
        llama_server,
        tmp_path,
        "decode-single",
        points=PointOptions(axis=Axis.UNDERVOLT, hold_cap_w=300.0),
        # one step and its soak: the plumbing against a real server, not the search's shape
        # (tests/integration/test_undervolt_e2e.py has that on the simulated card)
        undervolt=UndervoltOptions(max_offset_mhz=30.0, margin_mhz=15.0, soak_s=1.0),
    )
    run = run_session(options, build_rig).run_dir
    meta = read_json(run / "run.json")
    assert meta["status"] == "complete", meta.get("error")
    record = meta["undervolt"]
    # a real server's answers do not follow a simulated card: every step holds
    assert record["last_stable_mhz"] == 30.0 and record["first_unstable_mhz"] is None
    assert record["chosen_mhz"] == 15.0  # 30 less the 15 MHz margin
    assert "highest offset" in record["ended"]
    # its rate is the server's, not the simulated card's: the steps were not judged by it
    assert "stretch_unchecked" in [f["kind"] for f in meta["faults"]]
