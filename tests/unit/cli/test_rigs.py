"""powersweep.cli.rigs: the composition root. The simulated rig's clock (virtual, paced, scaled or
real with ``--url``), its node's name, the rig a sweep gets (its facts for run.json, the journal
that rebuilds it, a connector only on virtual time, the simulator's settings applied to the
cards, a real server's requests driving the simulated card), the rigs of ``status`` / ``apply``
and ``restore``, and a ``--sim-state`` file handed back to the user under sudo."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import rigs
from powersweep.errors import UsageError
from powersweep.sim.sim_options import SimOptions
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.combined import CombinedBackend
from powersweep.sweep.options import (
    Backend,
    CardOptions,
    ServerOptions,
    SweepOptions,
)


@pytest.fixture(autouse=True)
def _node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POWERSWEEP_SIM_NODE", "node7")
    monkeypatch.setattr(rigs, "is_root", lambda: False)


def test_the_simulated_clock_is_virtual_paced_scaled_or_real(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    switched: list[float] = []
    monkeypatch.setattr(sys, "setswitchinterval", switched.append)
    assert rigs.sim_clock(SimOptions()).kind == "virtual"
    assert rigs.sim_clock(SimOptions(pace=20.0)).kind == "paced"
    scaled = rigs.sim_clock(SimOptions(time_scale=50.0))
    assert (scaled.kind, scaled.scale) == ("scaled", 50.0)
    # the GIL switches finer, so a token's stamp is not late by 50 x 5 ms
    assert switched == [min(sys.getswitchinterval(), 0.0002)]
    real = rigs.sim_clock(SimOptions(), url="http://127.0.0.1:8080")
    assert (real.kind, real.scale) == ("real", 1.0)
    assert len(switched) == 1  # real time needs no finer switching


def test_the_node_is_the_flag_else_the_environment_else_the_host(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert rigs.sim_node(SimOptions(node="flagged")) == "flagged"
    assert rigs.sim_node(SimOptions()) == "node7"
    monkeypatch.delenv("POWERSWEEP_SIM_NODE")
    monkeypatch.setattr(rigs.socket, "gethostname", lambda: "host.example")
    assert rigs.sim_node(SimOptions()) == "host.example"


def test_a_simulated_sweeps_rig_records_what_rebuilds_it() -> None:
    options = SweepOptions(simulate="rtx3090-air + mi300x")
    with rigs.build_rig(options, SimOptions(seed=3, server="vllm")) as rig:
        assert rig.simulation is not None
        margins = rig.simulation["stable_offset_mhz"]
        assert rig.simulation == {
            "profile": "rtx3090-air + mi300x",
            "seed": 3,
            "time_scale": None,
            "clock": "virtual",
            "pace_run_s_per_s": None,
            "server_flavour": "vllm",
            "node": "node7",
            "world": None,  # no --sim-world model on
            # the truth of an undervolt search: each serving card's margin, and the reset
            "stable_offset_mhz": margins,
            "vf_reset_beyond_mhz": 50.0,
            # and of a memory offset search: each card's memory margin (none on the MI300X)
            "stable_mem_offset_mhz": rig.simulation["stable_mem_offset_mhz"],
        }
        assert list(margins) == ["0", "1"] and 150.0 <= margins["0"] <= 200.0
        assert margins["1"] == 0.0  # an AMD card has no offset to undervolt with
        assert rig.journal_backend == {
            "kind": "sim",
            "profiles": ["rtx3090-air", "mi300x"],
            "node": "node7",
            "sim_state": None,
            "seed": 3,
        }
        assert rig.connector is not None  # virtual time: the client reaches it in memory
        assert not rig.limits_outlive_process and rig.load_seed == 3
        assert rig.recorded_options["sim_server"] == "vllm" and rig.recorded_options["seed"] == 3
        assert isinstance(rig.backend, CombinedBackend) and rig.backend.device_count() == 2
        client = object()
        assert rig.wrap_client(client) is client  # its own server does the work
        assert rig.tps_follows_card  # the simulated server's rate follows the simulated card
        truth = rig.truth([300.0], {})
        assert truth is not None and [c["cap_w"] for c in truth["caps"]] == [300.0]


def test_the_simulators_settings_reach_the_cards(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    sim = SimOptions(context=2048, rejects_below_w=250.0, mem_locks_refused=True, state=state)
    with rigs.build_rig(SweepOptions(simulate="rtx4090-air"), sim) as rig:
        assert isinstance(rig.backend, SimRig)
        profile = rig.backend.gpus[0].profile
        assert profile.context_tokens == 2048 and profile.rejects_below_w == 250.0
        assert profile.mem_locks_supported is False
        assert rig.limits_outlive_process  # settings kept in a file outlive the process
        assert rig.journal_backend["sim_state"] == str(state.resolve())


def test_the_stable_margins_recorded_are_the_serving_cards_and_a_replay_has_none(
    tmp_path: Path,
) -> None:
    sim = SimOptions(seed=5, serving_gpus=(1,), vf_reset_beyond_mhz=0.0)
    with rigs.build_rig(SweepOptions(simulate="rtx4090-air+rtx4090-air"), sim) as rig:
        assert isinstance(rig.backend, SimRig) and rig.simulation is not None
        assert rig.simulation["stable_offset_mhz"] == {
            "1": rig.backend.gpus[1].truth_stable_offset_mhz
        }
        assert rig.simulation["vf_reset_beyond_mhz"] == 0.0
    csv = tmp_path / "caps.csv"
    csv.write_text("cap_w,power_w,narr_tps\n200,199,20\n250,249,27\n300,295,31\n350,330,33\n")
    with rigs.build_rig(SweepOptions(simulate=f"replay:{csv}")) as rig:
        assert rig.simulation is not None
        assert rig.simulation["stable_offset_mhz"] is None
        assert rig.simulation["vf_reset_beyond_mhz"] is None


def test_a_simulated_card_the_backend_cannot_drive_is_refused() -> None:
    options = SweepOptions(simulate="mi300x", cards=CardOptions(backend=Backend.NVML))
    with (
        pytest.raises(UsageError, match="--backend nvml cannot drive the simulated mi300x"),
        rigs.build_rig(options),
    ):
        pass


def test_a_real_servers_requests_drive_the_simulated_card(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[tuple[str, Any]] = []
    monkeypatch.setattr(SimRig, "work_started", lambda self, kind: events.append(("start", kind)))
    monkeypatch.setattr(SimRig, "work_finished", lambda self, kind: events.append(("end", kind)))
    monkeypatch.setattr(SimRig, "prefill_rate_tps", lambda self, n: events.append(("prompt", n)))

    class Client:
        info = "the server's info"

        async def chat(self, prompt: str, **kw: Any) -> str:
            events.append(("chat", kw["prompt_kind"]))
            if kw["prompt_kind"] == "code":
                raise RuntimeError("connection lost")
            return "answer"

        async def queued_requests(self) -> int | None:
            return 2

        async def count_tokens(self, text: str) -> int | None:
            return 9

        async def aclose(self) -> None:
            events.append(("closed", None))

    options = SweepOptions(simulate="rtx3090-air", server=ServerOptions(url="http://srv:8080"))
    with rigs.build_rig(options) as rig:
        assert rig.clock.kind == "real" and rig.connector is None
        assert rig.simulation is not None and rig.simulation["server_flavour"] is None
        assert not rig.tps_follows_card  # a real server's rate is its own
        with rig.serve() as url:
            assert url is None  # the sweep talks to --url
        client = rig.wrap_client(Client())
        assert client.info == "the server's info"
        assert asyncio.run(client.chat("p" * 4000, prompt_kind="prefill")) == "answer"
        assert asyncio.run(client.chat("story", prompt_kind="narr")) == "answer"
        with pytest.raises(RuntimeError):
            asyncio.run(client.chat("code", prompt_kind="code"))
        assert asyncio.run(client.queued_requests()) == 2
        assert asyncio.run(client.count_tokens("x")) == 9
        asyncio.run(client.aclose())
    assert events == [
        ("start", "prefill"),
        ("prompt", 1000),  # a long prompt's prefill, marked by its length
        ("chat", "prefill"),
        ("end", "prefill"),
        ("start", "decode"),
        ("chat", "narr"),
        ("end", "decode"),
        ("start", "decode"),
        ("chat", "code"),
        ("end", "decode"),  # a failed request ends its work too
        ("closed", None),
    ]


def test_the_settings_rig_of_simulated_cards_rebuilds_itself(tmp_path: Path) -> None:
    state = tmp_path / "state.json"
    with rigs.build_settings_rig("rtx4090-air+mi300x", state, sim_node="n3") as rig:
        assert rig.simulated and rig.backend.device_count() == 2
        assert rig.rig_args == (
            "--simulate",
            "rtx4090-air+mi300x",
            "--sim-state",
            str(state.resolve()),
        )
        assert rig.journal_backend == {
            "kind": "sim",
            "profiles": ["rtx4090-air", "mi300x"],
            "node": "n3",
            "sim_state": str(state.resolve()),
            "seed": 0,
        }
    with rigs.build_settings_rig("rtx4090-air", None) as rig:
        assert rig.rig_args == ("--simulate", "rtx4090-air")
        assert rig.journal_backend["node"] == "node7"


def test_status_and_apply_refuse_a_replayed_curve_and_the_wrong_vendor() -> None:
    with (
        pytest.raises(UsageError, match="not replayed curves"),
        rigs.build_settings_rig("replay:caps.csv", None),
    ):
        pass
    with (
        pytest.raises(UsageError, match="--backend amdsmi cannot drive the simulated h100-sxm"),
        rigs.build_settings_rig("h100-sxm", None, backend="amdsmi"),
    ):
        pass


class _Closing:
    def __init__(self) -> None:
        self.closed = False

    def device_count(self) -> int:
        return 1

    def close(self) -> None:
        self.closed = True


def test_real_cards_settings_rig_names_the_library_that_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = _Closing()
    monkeypatch.setattr(rigs, "open_backend", lambda kind: (backend, "amdsmi"))
    with rigs.build_settings_rig(None, None, backend="auto") as rig:
        assert not rig.simulated and rig.backend is backend
        assert rig.rig_args == ("--backend", "amdsmi")
        assert rig.journal_backend == {"kind": "amdsmi"}
    assert backend.closed
    monkeypatch.setattr(rigs, "open_backend", lambda kind: (backend, "auto"))
    with rigs.build_settings_rig(None, None) as rig:
        assert rig.rig_args == ()  # both libraries: the boot unit asks for no backend


def test_restore_rebuilds_a_simulated_journals_cards(tmp_path: Path) -> None:
    spec = {"kind": "sim", "profiles": ["mi300x"], "node": "n1", "sim_state": None, "seed": 0}
    with rigs.restore_backend(spec) as backend:
        assert isinstance(backend, AmdsmiBackend) and backend.device_count() == 1
    with pytest.raises(UsageError, match="--backend does not apply to a simulated rig's journal"):
        rigs.restore_backend(spec, override="nvml")


def test_restore_of_real_cards_needs_root_and_takes_the_library_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []
    backend = _Closing()
    monkeypatch.setattr(rigs, "require_root", lambda: asked.append("root"))
    monkeypatch.setattr(rigs, "open_backend", lambda kind: (asked.append(kind), (backend, kind))[1])
    with rigs.restore_backend({"kind": "amdsmi"}) as got:
        assert got is backend
    assert backend.closed
    with rigs.restore_backend({"kind": "amdsmi"}, override="nvml"):
        pass
    with rigs.restore_backend({}):
        pass
    assert asked == ["root", "amdsmi", "root", "nvml", "root", "nvml"]


def test_under_sudo_the_state_file_goes_back_to_the_user(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    handed: list[tuple[list[Path], Any]] = []
    monkeypatch.setattr(rigs, "is_root", lambda: True)
    monkeypatch.setattr(rigs, "invoking_user", lambda: "alice")
    monkeypatch.setattr(rigs, "hand_over", lambda paths, user, warn: handed.append((paths, user)))
    state = tmp_path / "state.json"
    with rigs.build_settings_rig("rtx4090-air", state):
        assert handed == []  # only once the command is done with it
    assert handed == [([state], "alice")]
    with rigs.build_settings_rig("rtx4090-air", None):
        pass
    assert len(handed) == 1  # no file, nothing to hand over
