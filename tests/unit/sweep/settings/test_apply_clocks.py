"""sweep/settings clock locks: snapped plans, verified writes, all-or-nothing with the cap, the
recommendation of a clock run, and the boot unit's lock lines."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from powersweep.clock import ScaledClock
from powersweep.errors import GpuError, UsageError
from powersweep.sim.profiles import get_profile
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.settings.applier import apply_settings, plan_caps
from powersweep.sweep.settings.boot_unit import BootCommand, BootSetting, read_unit, render_unit
from powersweep.sweep.settings.clock_locks import plan_clocks, plan_unlock
from powersweep.sweep.settings.recommendation import read_recommendation
from powersweep.sweep.settings.targets import select_gpus
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"


def _nvml(*devices: FakeDevice) -> tuple[Any, NvmlBackend]:
    fake = FakeNvml(devices=list(devices))
    return fake, NvmlBackend(nvml=fake)


def _sim(tmp_path: Path, *, second_refuses_mem: bool = False) -> SimRig:
    p = get_profile("rtx3090-air")
    other = replace(p, mem_locks_supported=False) if second_refuses_mem else p
    return SimRig([p, other], ScaledClock(1.0), state_file=tmp_path / "state.json")


def _ignore_warning(_message: str) -> None:
    pass


# --- plan: snapped to the supported clocks, or refused -------------------------------------


def test_a_clock_off_the_list_is_snapped_with_a_warning_or_refused_with_strict() -> None:
    _, backend = _nvml(FakeDevice(uuid=UUID_A))  # SM clocks 2100..210 in 15 MHz steps
    targets = select_gpus(backend, None, _ignore_warning)
    seen: list[str] = []
    (c,) = plan_clocks(targets, 1401, 9000, strict=False, warn=seen.append)
    assert (c.sm_mhz, c.mem_mhz) == (1395.0, 9501.0)
    assert any("1401 MHz is not a supported SM clock" in w and "snapped to 1395" in w for w in seen)
    assert any("9000 MHz is not a supported memory clock" in w for w in seen)
    (exact,) = plan_clocks(targets, 1410, None, strict=True, warn=seen.append)
    assert (exact.sm_mhz, exact.mem_mhz, exact.kinds()) == (1410.0, None, ("sm",))
    with pytest.raises(UsageError, match=r"5000 MHz is not a supported SM clock.*--strict"):
        plan_clocks(targets, 5000, None, strict=True, warn=_ignore_warning)
    # the SM clocks of the memory tier asked for: the idle tier lists none above 1005 MHz
    (idle,) = plan_clocks(targets, 1800, 405, strict=False, warn=_ignore_warning)
    assert (idle.sm_mhz, idle.mem_mhz) == (1005.0, 405.0)


@pytest.mark.parametrize("bad", [0.0, -300.0, float("nan"), float("inf")])
def test_a_clock_that_is_not_a_positive_number_is_refused(bad: float) -> None:
    _, backend = _nvml(FakeDevice(uuid=UUID_A))
    targets = select_gpus(backend, None, _ignore_warning)
    with pytest.raises(UsageError, match="--sm-clock takes a positive number of MHz"):
        plan_clocks(targets, bad, None, strict=False, warn=_ignore_warning)
    with pytest.raises(UsageError, match="--mem-clock takes a positive number of MHz"):
        plan_clocks(targets, None, bad, strict=False, warn=_ignore_warning)


def test_a_card_that_cannot_list_its_clocks_takes_them_as_given_unless_strict() -> None:
    fail = {"nvmlDeviceGetSupportedMemoryClocks": fake_pynvml.NVML_ERROR_NOT_SUPPORTED}
    _, backend = _nvml(FakeDevice(uuid=UUID_A, fail=fail))
    targets = select_gpus(backend, None, _ignore_warning)
    seen: list[str] = []
    (c,) = plan_clocks(targets, 1401, None, strict=False, warn=seen.append)
    assert c.sm_mhz == 1401 and any("used as given" in w for w in seen)
    with pytest.raises(UsageError, match="--strict"):
        plan_clocks(targets, 1401, None, strict=True, warn=_ignore_warning)


# --- write, verify, roll back --------------------------------------------------------------


def test_nvml_locks_are_set_but_never_claimed_verified_and_reset_unlocks_both() -> None:
    fake, backend = _nvml(FakeDevice(uuid=UUID_A))
    targets = select_gpus(backend, None, _ignore_warning)
    clocks = plan_clocks(targets, 1410, 9501, strict=False, warn=_ignore_warning)
    caps, (r,) = apply_settings([], clocks, _ignore_warning)
    assert caps == [] and r.verified is False and r.readback.known is False
    dev = fake.devices[0]
    # SM from the card's idle floor to the lock; memory min = max
    assert (dev.locked_sm, dev.locked_mem) == ((210, 1410), (9501, 9501))
    apply_settings([], plan_unlock(targets), _ignore_warning)
    assert (dev.locked_sm, dev.locked_mem) == (None, None)
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0


def test_sim_locks_are_verified_by_read_back(tmp_path: Path) -> None:
    rig = _sim(tmp_path)
    targets = select_gpus(rig, None, _ignore_warning)
    clocks = plan_clocks(targets, 1500, 9751, strict=True, warn=_ignore_warning)
    r = apply_settings([], clocks, _ignore_warning)[1][0]
    assert r.verified and (r.readback.sm_mhz, r.readback.mem_mhz) == (1500.0, 9751.0)
    state = json.loads((tmp_path / "state.json").read_text())
    assert state[f"{targets[1].identity.uuid}#locks"] == {
        "sm": 1500.0,
        "mem": 9751.0,
        "sm_min": 210.0,
    }
    assert r.readback.sm_min_mhz == 210.0


def test_a_card_that_refuses_its_lock_puts_every_cap_and_lock_back(tmp_path: Path) -> None:
    rig = _sim(tmp_path, second_refuses_mem=True)
    targets = select_gpus(rig, None, _ignore_warning)
    first = targets[0].gpu
    assert first.lock_sm_clock(1200).accepted  # a lock of the user's own, before apply
    limits = [t.gpu.envelope().current_w for t in targets]
    caps = plan_caps(targets, 250, strict=False, warn=_ignore_warning)
    clocks = plan_clocks(targets, 1500, 9751, strict=False, warn=_ignore_warning)
    with pytest.raises(GpuError, match=r"does not support memory clock locks.*were put back"):
        apply_settings(caps, clocks, _ignore_warning)
    assert [t.gpu.envelope().current_w for t in targets] == limits
    back = first.locked_clocks()
    assert (back.sm_mhz, back.mem_mhz) == (1200.0, None)
    assert targets[1].gpu.locked_clocks().sm_mhz is None


def test_on_nvml_a_refused_lock_rolls_back_and_unlocks_what_it_locked() -> None:
    fake, backend = _nvml(
        FakeDevice(uuid=UUID_A, limit_mw=350_000),
        FakeDevice(uuid=UUID_B, limit_mw=350_000, mem_locks_supported=False),
    )
    targets = select_gpus(backend, None, _ignore_warning)
    caps = plan_caps(targets, 290, strict=False, warn=_ignore_warning)
    clocks = plan_clocks(targets, 1410, 9501, strict=False, warn=_ignore_warning)
    with pytest.raises(GpuError, match=r"GPU 1 .*memory clock locks.*were put back"):
        apply_settings(caps, clocks, _ignore_warning)
    assert [d.limit_mw for d in fake.devices] == [350_000, 350_000]
    assert [(d.locked_sm, d.locked_mem) for d in fake.devices] == [(None, None), (None, None)]


def test_on_nvml_a_lock_held_before_cannot_be_put_back_and_the_error_says_so() -> None:
    # the card reports a user clock setting in force: the lock before is unknown, not restorable
    fake, backend = _nvml(
        FakeDevice(uuid=UUID_A, clock_event_bits=0x2),
        FakeDevice(uuid=UUID_B, mem_locks_supported=False),
    )
    targets = select_gpus(backend, None, _ignore_warning)
    clocks = plan_clocks(targets, 1410, 9501, strict=False, warn=_ignore_warning)
    with pytest.raises(
        GpuError, match=r"NOT put back: GPU 0 \(SM clock: the lock before.*GPU 0 \(memory clock"
    ):
        apply_settings([], clocks, _ignore_warning)
    assert fake.devices[0].locked_mem is None


# --- a clock run's recommendation ----------------------------------------------------------

RUN = {
    "schema_version": 1,
    "status": "complete",
    "axis": "grid",
    "options": {"axis": "grid", "hold_cap_w": 300.0},
    "gpus": [{"index": 0, "name": "NVIDIA GeForce RTX 3090", "uuid": UUID_A}],
}
PEAK = {"sm_lock_mhz": 1410.0, "mem_lock_mhz": 9501.0, "cap_w": 300.0, "tps_per_w": 0.12}
NEAR = {"sm_lock_mhz": 1710.0, "mem_lock_mhz": None, "cap_w": 300.0, "tps_per_w": 0.11}
ANALYSIS = {"schema_version": 1, "kind": "clocks", "peak": PEAK, "sweet_spot": PEAK}
# a peak without locks (analysis.json writes the peak under both names)
UNLOCKED = {**PEAK, "sm_lock_mhz": None, "mem_lock_mhz": None}
ANALYSIS["near_peak"] = NEAR


def _clock_run_dir(tmp_path: Path, run: dict[str, Any], analysis: dict[str, Any]) -> Path:
    d = tmp_path / "clock-run"
    d.mkdir()
    (d / "run.json").write_text(json.dumps(run))
    (d / "analysis.json").write_text(json.dumps(analysis))
    return d


def test_a_clock_run_recommends_its_peak_locks_and_the_cap_it_held(tmp_path: Path) -> None:
    d = _clock_run_dir(tmp_path, RUN, ANALYSIS)
    rec = read_recommendation(d)
    assert (rec.objective, rec.sm_clock_mhz, rec.mem_clock_mhz, rec.cap_w) == (
        "tps-per-w",
        1410.0,
        9501.0,
        300.0,
    )
    assert rec.clock_run and rec.describe() == "SM 1410 MHz, memory 9501 MHz at 300 W per GPU"
    near = read_recommendation(d, "near-peak")
    assert (near.sm_clock_mhz, near.mem_clock_mhz) == (1710.0, None)


def test_a_clock_run_without_a_held_cap_leaves_the_limit_alone(tmp_path: Path) -> None:
    d = _clock_run_dir(tmp_path, {**RUN, "options": {"axis": "grid", "hold_cap_w": None}}, ANALYSIS)
    rec = read_recommendation(d)
    assert rec.cap_w is None and rec.describe() == "SM 1410 MHz, memory 9501 MHz"


@pytest.mark.parametrize(
    ("analysis", "objective", "needle"),
    [
        ({**ANALYSIS, "peak": None, "sweet_spot": None}, None, "holds no tps-per-w clock"),
        ({**ANALYSIS, "near_peak": None}, "near-peak", "holds no near-peak clock"),
        (ANALYSIS, "cost", "clock run: it recommends clock locks for tps-per-w, near-peak or slo"),
        ({**ANALYSIS, "peak": UNLOCKED, "sweet_spot": UNLOCKED}, None, "has no valid clock lock"),
    ],
)
def test_a_clock_run_without_that_recommendation_is_refused(
    tmp_path: Path, analysis: dict[str, Any], objective: str | None, needle: str
) -> None:
    d = _clock_run_dir(tmp_path, RUN, analysis)
    with pytest.raises(UsageError, match=needle):
        read_recommendation(d, objective)


# --- the boot unit -------------------------------------------------------------------------


def test_the_nvidia_smi_unit_locks_clocks_with_lgc_and_lmc_ranges() -> None:
    settings = [
        BootSetting(UUID_A, "x", 290.0, 1410.0, 9501.0),
        BootSetting(UUID_B, "x", None, 1395.0, None),
    ]
    text = render_unit(settings, BootCommand("nvidia-smi", ("/usr/bin/nvidia-smi",)), "run")
    smi = "/usr/bin/nvidia-smi"
    assert [ln.removeprefix("ExecStart=") for ln in text.splitlines() if "ExecStart" in ln] == [
        f"-{smi} -i {UUID_A} --persistence-mode=1",
        f"-{smi} -i {UUID_A} --power-limit=290",
        f"-{smi} -i {UUID_A} -lgc 1410,1410",
        f"-{smi} -i {UUID_A} -lmc 9501,9501",
        f"-{smi} -i {UUID_B} --persistence-mode=1",
        f"-{smi} -i {UUID_B} -lgc 1395,1395",
    ]


def test_the_powersweep_unit_passes_the_locks_and_status_reads_them_back(tmp_path: Path) -> None:
    settings = [BootSetting(UUID_A, "x", None, 1410.0, 9501.0)]
    text = render_unit(settings, BootCommand("powersweep", ("/opt/ps", "apply")), "run")
    assert (
        f"ExecStart=-/opt/ps apply --at-boot --sm-clock 1410 --mem-clock 9501 --gpus {UUID_A}"
        in (text.splitlines())
    )
    (tmp_path / "powersweep-apply.service").write_text(text)
    (read,) = read_unit(tmp_path).settings
    assert read == settings[0] and read.describe() == "SM 1410 MHz, memory 9501 MHz"
    # a unit written before clock locks existed still reads
    old = text.replace(',"sm_clock_mhz":1410.0,"mem_clock_mhz":9501.0', "").replace(
        '"power_limit_w":null', '"power_limit_w":290'
    )
    (tmp_path / "powersweep-apply.service").write_text(old)
    (legacy,) = read_unit(tmp_path).settings
    assert (legacy.power_limit_w, legacy.sm_clock_mhz, legacy.mem_clock_mhz) == (290.0, None, None)
