"""status and apply through the NVML backend (against the fake pynvml): root, units, errors."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import apply as apply_cli
from powersweep.cli import rigs
from powersweep.sweep.gpu.nvml import NvmlBackend
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml
from tests.helpers.cli import run_cli as cli

UUID = "GPU-12345678-0000-0000-0000-000000000000"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Any:
    """The composition root hands out an NVML backend over a fake pynvml."""
    nvml = FakeNvml(devices=[FakeDevice(uuid=UUID, limit_mw=370_000, default_mw=350_000)])

    @contextlib.contextmanager
    def build(
        simulate: str | None,
        sim_state: Path | None,
        backend: str = "auto",
        sim_node: str | None = None,
    ) -> Iterator[rigs.SettingsRig]:
        assert simulate is None
        with NvmlBackend(nvml=nvml) as backend:
            yield rigs.SettingsRig(backend, simulated=False)

    monkeypatch.setattr(rigs, "build_settings_rig", build)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("POWERSWEEP_UNIT_DIR", raising=False)
    return nvml


def test_a_write_without_root_is_refused_before_any_change(
    fake: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_cli, "is_root", lambda: False)
    code, out, err = cli(capsys, "apply", "--cap", "290")
    assert code == 2 and out == ""
    assert err.startswith("error: applying GPU settings needs root") and err.count("\n") == 1
    assert fake.devices[0].limit_mw == 370_000
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0
    # a dry run and the unit's text need no root
    code, out, _ = cli(capsys, "apply", "--cap", "290", "--dry-run")
    assert code == 0 and "370 W -> 290 W (dry run" in out
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0


def test_as_root_apply_sets_and_verifies_and_warns_without_persistence(
    fake: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_cli, "is_root", lambda: True)
    code, out, err = cli(capsys, "apply", "--cap", "290", "--gpus", UUID)
    assert code == 0, err
    assert "370 W -> 290 W (verified: reads back 290 W)" in out
    assert fake.devices[0].limit_mw == 290_000
    assert "persistence mode is off on GPU 0" in err
    code, out, err = cli(capsys, "apply", "--reset")
    assert code == 0 and fake.devices[0].limit_mw == 350_000


def test_the_real_rigs_unit_calls_nvidia_smi_by_absolute_path(
    fake: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    monkeypatch.setattr(apply_cli, "is_root", lambda: False)
    code, out, err = cli(capsys, "apply", "--cap", "290", "--print-unit")
    assert code == 0, err
    assert f"ExecStart=-{smi} -i {UUID} --power-limit=290" in out.splitlines()
    assert f"ExecStart=-{smi} -i {UUID} --persistence-mode=1" in out.splitlines()
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0


def test_status_on_nvml_needs_no_root_and_says_locks_are_unreadable(
    fake: Any, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, err = cli(capsys, "status", "--json", "--unit-dir", str(tmp_path))
    assert code == 0, err
    data = json.loads(out)
    (gpu,) = data["gpus"]
    assert gpu["uuid"] == UUID and gpu["power_limit"]["current_w"] == 370.0
    assert gpu["power_limit"]["differs_from_default"] is True
    assert gpu["locked_clocks"]["known"] is False and gpu["persistence_mode"] is False
    assert data["unit"]["installed"] is False
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0
    assert fake.calls_to("nvmlDeviceSetPersistenceMode") == 0


def test_clock_locks_on_nvml_are_set_not_claimed_verified_and_reset_unlocks_them(
    fake: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(apply_cli, "is_root", lambda: True)
    dev = fake.devices[0]
    code, out, err = cli(capsys, "apply", "--sm-clock", "1410", "--mem-clock", "9501", "--dry-run")
    assert code == 0, err
    assert (
        "clock locks unknown (NVML cannot read clock locks) -> SM 210-1410 MHz, memory 9501" in out
    )
    assert fake.calls_to("nvmlDeviceSetGpuLockedClocks") == 0
    code, out, err = cli(capsys, "apply", "--sm-clock", "1410", "--mem-clock", "9501")
    assert code == 0, err
    assert "-> SM 210-1410 MHz, memory 9501 MHz (set; not verified: NVML cannot read" in out
    assert "verified: reads back" not in out
    assert (dev.locked_sm, dev.locked_mem) == ((210, 1410), (9501, 9501))
    assert dev.limit_mw == 370_000  # a lock alone leaves the power limit alone
    code, out, err = cli(capsys, "apply", "--reset")
    assert code == 0, err
    assert "-> SM unlocked, memory unlocked" in out
    assert (dev.locked_sm, dev.locked_mem, dev.limit_mw) == (None, None, 350_000)


def test_the_real_rigs_unit_locks_clocks_with_nvidia_smi(
    fake: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    smi = tmp_path / "bin" / "nvidia-smi"
    smi.parent.mkdir()
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", str(smi.parent))
    code, out, err = cli(capsys, "apply", "--sm-clock", "1401", "--print-unit")
    assert code == 0, err
    lines = out.splitlines()
    assert f"ExecStart=-{smi} -i {UUID} -lgc 210,1395" in lines  # snapped, with a warning
    assert "snapped to 1395 MHz" in err
    # the limit in force (370 W, not the 350 W default) stays at boot too
    assert f"ExecStart=-{smi} -i {UUID} --power-limit=370" in lines
    assert not any("-lmc" in ln for ln in lines)
    # a card without settable power limits: the unit locks its clocks and sets no limit
    fake.devices[0].power_managed = False
    code, out, err = cli(capsys, "apply", "--sm-clock", "1410", "--print-unit")
    assert code == 0, err
    assert f"ExecStart=-{smi} -i {UUID} -lgc 210,1410" in out.splitlines()
    assert "--power-limit" not in out
    assert fake.calls_to("nvmlDeviceSetGpuLockedClocks") == 0
