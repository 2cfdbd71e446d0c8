"""status, apply and the boot unit on AMD cards through the composition root, with the real
amdsmi backend over the fake amdsmi (and NVIDIA and AMD cards in one machine)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powersweep.cli import _boot as boot_cli
from powersweep.cli import apply as apply_cli
from powersweep.cli import gpu_backends, rigs
from powersweep.errors import GpuError
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.combined import CombinedBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from tests.fakes.fake_amdsmi import FakeAmdsmi, mi300x
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml
from tests.helpers.cli import run_cli as cli

UUID = "1fff74a1-0000-1000-8000-0000000000a0"
NV_UUID = "GPU-12345678-0000-0000-0000-000000000000"


@pytest.fixture
def amd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeAmdsmi:
    """``--backend auto`` finds one MI300X (a fake amdsmi) and no NVIDIA driver."""
    fake = FakeAmdsmi([mi300x(uuid=UUID, cap_uw=700_000_000)])

    def open_nvml() -> NvmlBackend:
        raise GpuError("NVML not available: is the NVIDIA driver installed? (test)")

    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", open_nvml)
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("POWERSWEEP_UNIT_DIR", raising=False)
    monkeypatch.setattr(apply_cli, "is_root", lambda: True)
    return fake


def _tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *names: str) -> dict[str, Path]:
    """Fake vendor tools on PATH (nothing else is)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    out = {}
    for name in names:
        tool = bin_dir / name
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
        out[name] = tool
    monkeypatch.setenv("PATH", str(bin_dir))
    return out


def test_apply_on_an_mi300x_sets_and_verifies_without_a_persistence_warning(
    amd: FakeAmdsmi, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "apply", "--cap", "500", "--gpus", UUID)
    assert code == 0, err
    assert "700 W -> 500 W (verified: reads back 500 W)" in out
    assert "persistence" not in err
    assert amd.cards[0].cap_uw == 500_000_000
    code, out, err = cli(capsys, "apply", "--reset")
    assert code == 0 and amd.cards[0].cap_uw == 750_000_000, err


def test_status_shows_the_amd_card_and_its_unlocked_clocks(
    amd: FakeAmdsmi, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "status", "--json", "--unit-dir", str(tmp_path))
    assert code == 0, err
    (gpu,) = json.loads(out)["gpus"]
    assert (gpu["uuid"], gpu["vendor"], gpu["persistence_mode"]) == (UUID, "amd", True)
    assert gpu["power_limit"]["current_w"] == 700.0
    assert gpu["locked_clocks"]["known"] is True
    assert amd.calls_to("amdsmi_set_power_cap") == 0


def test_the_boot_unit_calls_amd_smi_by_absolute_path_per_setting(
    amd: FakeAmdsmi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    smi = _tool(tmp_path, monkeypatch, "amd-smi")["amd-smi"]
    code, out, err = cli(capsys, "apply", "--cap", "500", "--sm-clock", "1500", "--print-unit")
    assert code == 0, err
    lines = out.splitlines()
    execs = [ln for ln in lines if ln.startswith("ExecStart=")]
    assert execs == [
        f"ExecStart=-{smi} set -g {UUID} -o 500",
        f"ExecStart=-{smi} set -g {UUID} -l MANUAL",
        f"ExecStart=-{smi} set -g {UUID} -L sclk max 1500",
        f"ExecStart=-{smi} set -g {UUID} -L sclk min 500",  # the card's lowest level
    ]
    assert "WantedBy=multi-user.target" in lines
    assert not any("nvidia" in ln for ln in lines)
    assert amd.calls_to("amdsmi_set_power_cap") == 0  # printing the unit changes nothing


def test_without_amd_smi_the_unit_runs_powersweep_with_the_amd_backend(
    amd: FakeAmdsmi,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    _tool(tmp_path, monkeypatch)
    monkeypatch.setattr(boot_cli, "_VENDOR_TOOLS", {"amd": ("amd-smi", str(tmp_path / "bin"))})
    code, out, err = cli(capsys, "apply", "--cap", "500", "--print-unit")
    assert code == 0, err
    (line,) = [ln for ln in out.splitlines() if ln.startswith("ExecStart=")]
    assert f"apply --backend amdsmi --at-boot --cap 500 --gpus {UUID}" in line
    # and that is what the unit runs at boot: it sets the cap through amdsmi
    code, _, err = cli(
        capsys, "apply", "--backend", "amdsmi", "--at-boot", "--cap", "500", "--gpus", UUID
    )
    assert code == 0, err
    assert amd.cards[0].cap_uw == 500_000_000


def test_a_machine_with_both_vendors_gets_each_vendors_tool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    nvml = FakeNvml(devices=[FakeDevice(uuid=NV_UUID, limit_mw=300_000)])
    fake = FakeAmdsmi([mi300x(uuid=UUID)])
    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", lambda: NvmlBackend(nvml=nvml))
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    tools = _tool(tmp_path, monkeypatch, "amd-smi", "nvidia-smi")
    code, out, err = cli(capsys, "apply", "--cap", "300", "--print-unit")
    assert code == 0, err
    execs = [ln for ln in out.splitlines() if ln.startswith("ExecStart=")]
    assert f"ExecStart=-{tools['nvidia-smi']} -i {NV_UUID} --power-limit=300" in execs
    assert f"ExecStart=-{tools['amd-smi']} set -g {UUID} -o 300" in execs
    assert "Wants=nvidia-persistenced.service" in out


def test_one_cards_persist_keeps_the_other_vendors_line_with_its_own_tool(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The unit is merged by UUID: the NVIDIA card's line, persisted first, keeps nvidia-smi
    when the AMD card is persisted alone (each line is set by its own card's tool)."""
    nvml = FakeNvml(devices=[FakeDevice(uuid=NV_UUID, limit_mw=300_000)])
    fake = FakeAmdsmi([mi300x(uuid=UUID)])
    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", lambda: NvmlBackend(nvml=nvml))
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    monkeypatch.setattr(apply_cli, "is_root", lambda: True)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    tools = _tool(tmp_path, monkeypatch, "amd-smi", "nvidia-smi")
    units = tmp_path / "units"
    units.mkdir()
    for cap, gpu in (("280", "0"), ("500", "1")):
        code, _, err = cli(
            capsys, "apply", "--cap", cap, "--gpus", gpu, "--persist", "--unit-dir", str(units)
        )
        assert code == 0, err
    text = (units / "powersweep-apply.service").read_text()
    execs = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    assert f"ExecStart=-{tools['nvidia-smi']} -i {NV_UUID} --power-limit=280" in execs
    assert f"ExecStart=-{tools['amd-smi']} set -g {UUID} -o 500" in execs


def test_auto_opens_the_libraries_that_see_cards(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = FakeNvml(devices=[FakeDevice(), FakeDevice(uuid="GPU-b")])
    fake = FakeAmdsmi([mi300x()])
    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", lambda: NvmlBackend(nvml=nvml))
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "auto" and isinstance(backend, CombinedBackend)
    assert backend.device_count() == 3 and backend.gpu(2).identity().vendor == "amd"
    assert backend.gpu(2).index == 2
    backend.close()
    fake.cards.clear()  # no AMD card: NVML alone, amdsmi shut down again
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "nvml" and backend.device_count() == 2
    assert fake.init_count == 0
    backend.close()
    nvml.devices.clear()
    fake.cards.append(mi300x())
    backend, kind = gpu_backends.open_backend("auto")
    assert kind == "amdsmi" and backend.gpu(0).index == 0
    backend.close()


def test_the_journal_names_the_backend_that_started(monkeypatch: pytest.MonkeyPatch) -> None:
    from powersweep.sweep.options import Backend, CardOptions, SweepOptions

    fake = FakeAmdsmi([mi300x()])
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    with rigs.build_rig(SweepOptions(cards=CardOptions(backend=Backend.AMDSMI))) as rig:
        assert rig.journal_backend == {"kind": "amdsmi"}
        assert rig.backend.gpu(0).identity().vendor == "amd"
    assert fake.shutdown_calls == 1
