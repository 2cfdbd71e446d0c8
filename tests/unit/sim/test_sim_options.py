"""The simulated rig's options: owned by the simulator, validated there, recorded in run.json under
their flag names and read back for --resume."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import UsageError
from powersweep.sim.sim_options import FLAGS, SimOptions, refuse_without_simulate
from powersweep.sim.vf_stability import DEFAULT_RESET_BEYOND_MHZ
from powersweep.sweep.options import OutputOptions, SweepOptions


def test_the_sweep_options_hold_no_simulator_setting() -> None:
    sweep_fields = set(SweepOptions.__dataclass_fields__)
    assert sweep_fields.isdisjoint({"time_scale", "seed", "sim_pace", "sim_server", "sim_state"})
    assert not [f for f in sweep_fields if f.startswith("sim_")]
    assert set(FLAGS) == set(SimOptions.__dataclass_fields__)


def test_run_json_records_them_under_their_flag_names_and_resume_reads_them_back() -> None:
    sim = SimOptions(
        time_scale=None,
        pace=25.0,
        seed=7,
        server="vllm",
        state=Path("/tmp/s.json"),
        fault="pause-once@310",
        serving_gpus=(0, 2),
        reasoning_tokens=150,
    )
    recorded = sim.recorded()
    assert recorded["seed"] == 7 and recorded["sim_server"] == "vllm"
    assert recorded["sim_pace"] == 25.0 and recorded["time_scale"] is None
    assert recorded["sim_state"] == "/tmp/s.json" and recorded["sim_fault"] == "pause-once@310"
    assert SimOptions.from_recorded(recorded) == sim
    # a run recorded before a setting existed keeps its default
    assert SimOptions.from_recorded({"seed": 3}) == SimOptions(seed=3)


@pytest.mark.parametrize(
    ("sim", "url", "message"),
    [
        (SimOptions(time_scale=0.0), None, "--time-scale must be more than 0.01 and at most 1000"),
        (SimOptions(time_scale=1e-300), None, "--time-scale must be more than 0.01"),
        (SimOptions(pace=float("inf")), None, "--sim-pace must be more than 0.01 and at most"),
        (SimOptions(pace=10.0, time_scale=5.0), None, "--sim-pace paces"),
        (SimOptions(pace=10.0), "http://127.0.0.1:9", "--sim-pace paces"),
        (SimOptions(time_scale=10.0), "http://127.0.0.1:9", "--time-scale needs the simulated"),
        (SimOptions(server="tgi"), None, "--sim-server must be one of"),
        (SimOptions(slots=0), None, "--sim-slots must be at least 1"),
        (SimOptions(context=100), None, "--sim-context must be at least 256"),
        (SimOptions(reasoning_tokens=-1), None, "--sim-reasoning-tokens must be 0 or more"),
        (SimOptions(http_error=200), None, "--sim-http-error takes an HTTP error status"),
        (SimOptions(vf_reset_beyond_mhz=-1.0), None, "--sim-vf-reset-beyond-mhz takes 0 or more"),
        (SimOptions(vf_reset_beyond_mhz=math.nan), None, "--sim-vf-reset-beyond-mhz takes 0"),
        (SimOptions(fault="stall"), "http://127.0.0.1:9", "--sim-fault needs the simulated"),
    ],
)
def test_bad_settings_are_one_line_usage_errors(
    sim: SimOptions, url: str | None, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        sim.validate(url)


def test_settings_without_simulate_are_refused_by_name() -> None:
    refuse_without_simulate(SimOptions())
    with pytest.raises(UsageError, match="--time-scale works only with --simulate"):
        refuse_without_simulate(SimOptions(time_scale=5.0))
    with pytest.raises(UsageError, match="--sim-pace works only with --simulate"):
        refuse_without_simulate(SimOptions(pace=5.0))
    with pytest.raises(UsageError, match=r"--sim-\* options work only with --simulate"):
        refuse_without_simulate(SimOptions(mem_locks_refused=True))


def test_a_resumed_run_gets_the_simulated_rig_it_recorded(tmp_path: Path) -> None:
    import json

    from powersweep.cli.rigs import build_rig

    run = tmp_path / "run"
    run.mkdir()
    recorded = {"simulate": "rtx3090-air", **SimOptions(seed=7, server="vllm").recorded()}
    (run / "run.json").write_text(json.dumps({"options": recorded}))
    options = SweepOptions(simulate="rtx3090-air", output=OutputOptions(resume=run))
    with build_rig(options) as rig:
        assert rig.simulation is not None
        assert rig.simulation["seed"] == 7 and rig.simulation["server_flavour"] == "vllm"
        assert rig.load_seed == 7 and rig.recorded_options["sim_server"] == "vllm"
        assert rig.clock.kind == "virtual"
    # the flags given now do not change the rig, but the pace (which changes no figure) does
    with build_rig(options, SimOptions(seed=1, server="plain", pace=50.0)) as rig:
        assert rig.simulation is not None and rig.simulation["seed"] == 7
        assert rig.clock.kind == "paced" and rig.simulation["pace_run_s_per_s"] == 50.0
    # a run directory that cannot be read leaves the defaults (the session names the problem)
    nope = OutputOptions(resume=tmp_path / "nope")
    with build_rig(SweepOptions(simulate="rtx3090-air", output=nope)) as rig:
        assert rig.simulation is not None and rig.simulation["seed"] == 0


def test_the_hidden_reset_threshold_is_parsed_recorded_and_rebuilt_on_resume(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import json

    from powersweep.cli import main
    from powersweep.cli import sweep as sweep_cli
    from powersweep.cli.rigs import build_rig
    from powersweep.sim.sim_rig import SimRig

    assert SimOptions().vf_reset_beyond_mhz == DEFAULT_RESET_BEYOND_MHZ == 50.0
    given: list[SimOptions] = []

    def run_sweep(options: SweepOptions, sim: SimOptions, **kw: Any) -> None:
        given.append(sim)

    monkeypatch.setattr(sweep_cli, "run_sweep", run_sweep)
    assert main(["--simulate", "rtx3090-air", "--sim-vf-reset-beyond-mhz", "0"]) == 0
    assert main(["--simulate", "rtx3090-air"]) == 0
    assert [s.vf_reset_beyond_mhz for s in given] == [0.0, 50.0]
    assert main(["--simulate", "rtx3090-air", "--sim-vf-reset-beyond-mhz", "-5"]) == 2
    assert "--sim-vf-reset-beyond-mhz takes 0 or more MHz" in capsys.readouterr().err
    assert main(["sweep", "--help"]) == 0
    assert "--sim-vf-reset-beyond-mhz" not in capsys.readouterr().out  # a hidden test switch
    recorded = given[0].recorded()
    assert recorded["sim_vf_reset_beyond_mhz"] == 0.0
    assert SimOptions.from_recorded(recorded) == given[0]
    # --resume rebuilds the rig it recorded: its cards reset at any instability
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({"options": {"simulate": "rtx3090-air", **recorded}}))
    options = SweepOptions(simulate="rtx3090-air", output=OutputOptions(resume=run))
    with build_rig(options) as rig:
        assert isinstance(rig.backend, SimRig) and rig.backend.vf_reset_beyond_mhz == 0.0
        assert rig.simulation is not None and rig.simulation["vf_reset_beyond_mhz"] == 0.0
