"""Which GPUs a sweep caps (``sweep/gpu_choice.py``): the ones serving the model, found through
NVML's process list, or the ones given; their ``run.json`` facts; the warm-up's check that they
serve; limits settable before any change; an MI250X die never swept without its partner."""

from __future__ import annotations

import math
import os
import socket
from pathlib import Path

import pytest

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.gpu_choice import (
    check_settable,
    confirm_serving,
    gpu_meta,
    not_swept_busy,
    select_gpus,
)
from tests.fakes.fake_amdsmi import FakeAmdsmi, mi250x_dies, mi300x
from tests.fakes.fake_gpu import FakeGpu
from tests.fakes.fake_pynvml import (
    NVML_ERROR_NOT_SUPPORTED,
    FakeDevice,
    FakeNvml,
    FakeProcessInfo,
)

SERVER = 4242


def _serving_backend(*processes: list[FakeProcessInfo], fail: bool = False) -> NvmlBackend:
    devices = [
        FakeDevice(
            uuid=f"GPU-{i}",
            processes=procs,
            fail={"nvmlDeviceGetComputeRunningProcesses": NVML_ERROR_NOT_SUPPORTED} if fail else {},
        )
        for i, procs in enumerate(processes)
    ]
    return NvmlBackend(nvml=FakeNvml(devices=devices))


def _pick(backend: NvmlBackend, **kw: object) -> tuple[list[int], str, str, list[str]]:
    warnings: list[str] = []
    choice = select_gpus(backend, kw.pop("wanted", None), warnings.append, **kw)  # type: ignore[arg-type]
    return [g.index for g in choice.gpus], choice.how, choice.reason, warnings


def test_the_servers_process_picks_its_cards() -> None:
    backend = _serving_backend(
        [FakeProcessInfo(999)],  # another user's job holding memory on GPU 0
        [FakeProcessInfo(SERVER)],
        [FakeProcessInfo(SERVER, usedGpuMemory=None)],
        [],
    )
    picked, how, reason, warnings = _pick(backend, server_pids=frozenset({SERVER}))
    assert (picked, how, warnings) == ([1, 2], "server", [])
    assert f"PID {SERVER}" in reason and "GPU 1, 2" in reason


def test_without_the_servers_pid_any_process_holding_memory() -> None:
    backend = _serving_backend([FakeProcessInfo(5, usedGpuMemory=0)], [FakeProcessInfo(77)], [])
    picked, how, reason, _ = _pick(backend)
    assert (picked, how) == ([1], "memory") and "PID 77" in reason
    # a remote server's PID is not on this machine's cards: memory holders still decide
    picked, how, reason, _ = _pick(backend, server_pids=frozenset({SERVER}))
    assert (picked, how) == ([1], "memory") and "not found" in reason


def test_nothing_found_sweeps_every_card_with_a_warning() -> None:
    picked, how, _, warnings = _pick(_serving_backend([], []))
    assert (picked, how) == ([0, 1], "fallback")
    assert len(warnings) == 1 and "no process runs on any GPU" in warnings[0]
    picked, how, _, warnings = _pick(_serving_backend([], [], fail=True))
    assert (picked, how) == ([0, 1], "fallback") and "cannot list" in warnings[0]


def test_given_all_and_single_gpu() -> None:
    backend = _serving_backend([FakeProcessInfo(SERVER)], [])
    assert _pick(backend, wanted=(1,))[:2] == ([1], "given")
    assert _pick(backend, all_gpus=True)[:2] == ([0, 1], "all")
    # a given set still knows which of its cards serve: their utilization marks the load
    every = select_gpus(backend, None, lambda _m: None, all_gpus=True)
    assert every.busy_gpus == (0,) and every.meta()["serving"] == [0]
    other = select_gpus(backend, (1,), lambda _m: None)
    assert other.busy_gpus == (1,)  # none of the set serves: all of it counts
    assert _pick(_serving_backend([]))[:2] == ([0], "only")
    with pytest.raises(UsageError, match="no GPU 5"):
        _pick(backend, wanted=(5,))


def test_selection_meta_lists_processes_as_run_json_has_them() -> None:
    choice = select_gpus(_serving_backend([], [FakeProcessInfo(7, 2**30)]), None, lambda _m: None)
    meta = choice.meta()
    assert meta["picked"] == [1] and meta["how"] == "memory"
    assert meta["processes"] == {"0": [], "1": [{"pid": 7, "used_memory_mib": 1024.0}]}


def test_warmup_confirms_busy_cards_and_warns_about_idle_ones() -> None:
    warnings: list[str] = []
    facts = confirm_serving({0: 97.0, 1: 2.0, 2: math.nan}, warnings.append)
    assert facts["confirmed"] is False
    assert [w.split()[1] for w in warnings] == ["1", "2"]
    assert confirm_serving({0: 97.0}, warnings.append)["confirmed"] is True


def test_a_card_outside_the_set_that_got_busy_is_named() -> None:
    warnings: list[str] = []
    facts = not_swept_busy(
        {1: 3.0, 2: 90.0, 3: math.nan}, {1: 95.0, 2: 100.0, 3: 5.0}, warnings.append
    )
    assert len(warnings) == 1 and warnings[0].startswith("GPU 1 got busy")  # 2 was busy before
    assert facts["not_swept_warmup_util_pct"]["1"] == {"before": 3.0, "peak": 95.0}


def test_dry_run_picks_the_local_servers_card_without_contacting_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from powersweep.cli import main
    from powersweep.sweep.gpu import nvml

    # this process plays the server: it listens on a port and holds memory on GPU 1
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    fake = FakeNvml(
        devices=[
            FakeDevice(uuid="GPU-a", processes=[FakeProcessInfo(999)]),
            FakeDevice(uuid="GPU-b", processes=[FakeProcessInfo(os.getpid())]),
        ]
    )
    real = nvml.NvmlBackend
    monkeypatch.setattr(nvml, "NvmlBackend", lambda: real(nvml=fake))
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    try:
        code = main(["--dry-run", "--cooling", "air", "--url", f"http://127.0.0.1:{port}"])
    finally:
        server.close()
    out, err = capsys.readouterr()
    assert code == 0, err
    assert f"GPUs picked: 1 (the server's process (PID {os.getpid()}) runs on GPU 1)" in out
    assert "GPU 0:" not in out


def test_a_resumed_run_keeps_the_gpus_it_picked(tmp_path: Path) -> None:
    import json

    from powersweep.sweep.options import CardOptions, SweepOptions
    from powersweep.sweep.resume import resume_options

    run = tmp_path / "run"
    run.mkdir()
    recorded = SweepOptions(cards=CardOptions(all_gpus=True)).recorded()
    meta = {
        "schema_version": 1,
        "status": "interrupted",
        "options": recorded,
        "gpus": [{"index": 1, "uuid": "GPU-b"}],
    }
    (run / "run.json").write_text(json.dumps(meta))
    options, _ = resume_options(run, SweepOptions())
    assert options.cards.gpus == (1,) and options.cards.all_gpus is False


# --- run.json facts, settable limits, duplicates, MI250X dies --------------------------------


def test_gpu_meta_has_identity_envelope_and_the_power_source() -> None:
    backend = NvmlBackend(
        nvml=FakeNvml([FakeDevice(name="NVIDIA RTX A6000", uuid="GPU-x", limit_mw=300_000)])
    )
    meta = gpu_meta(backend.gpu(0))
    assert meta == {
        "index": 0,
        "name": "NVIDIA RTX A6000",
        "uuid": "GPU-x",
        "vram_mib": 24576,
        "driver_version": "570.133.07",
        "vendor": "nvidia",
        "min_limit_w": 100.0,
        "default_limit_w": 350.0,
        "max_limit_w": 390.0,
        "original_limit_w": 300.0,
        "slowdown_temp_c": 90.0,
        "power_source": "instant",
    }
    # a card without a power source of its own (the fake) reads as simulated
    assert gpu_meta(FakeGpu(2))["power_source"] == "simulated"


def test_check_settable_sets_each_card_to_the_limit_it_has() -> None:
    gpus = [FakeGpu(0, limit_w=280.0), FakeGpu(1, limit_w=300.0)]
    check_settable(gpus)  # type: ignore[arg-type]
    assert [g.limits_set for g in gpus] == [[280.0], [300.0]]
    assert [g.limit_w for g in gpus] == [280.0, 300.0]


def test_a_card_given_twice_is_swept_once_and_no_card_at_all_is_an_error() -> None:
    backend = _serving_backend([], [], [])
    assert _pick(backend, wanted=(2, 0, 2))[0] == [2, 0]
    with pytest.raises(PowersweepError, match=r"^no GPU found$"):
        _pick(NvmlBackend(nvml=FakeNvml(devices=[])))


def test_the_second_die_of_an_mi250x_is_not_swept_without_the_first() -> None:
    backend = AmdsmiBackend(FakeAmdsmi([*mi250x_dies(), mi300x()]))
    with pytest.raises(UsageError) as info:
        select_gpus(backend, (1, 2), lambda _m: None)
    assert str(info.value) == (
        "GPU 1 reads 0 W: its module's draw is reported by GPU 0 (the two dies of an MI250X); "
        "sweep both dies together, e.g. --gpus 0,1"
    )
    both = select_gpus(backend, (0, 1), lambda _m: None)
    assert [g.index for g in both.gpus] == [0, 1]


def test_a_busy_card_whose_first_reading_failed_is_named_without_nan() -> None:
    warnings: list[str] = []
    not_swept_busy({4: math.nan}, {4: 95.0}, warnings.append)
    assert len(warnings) == 1 and warnings[0].startswith("GPU 4 got busy")
    assert "(no reading -> 95% utilization)" in warnings[0] and "nan" not in warnings[0]
