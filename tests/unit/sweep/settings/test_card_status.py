"""The read-only status of every card (``sweep/settings/card_status.py``), on the fake pynvml:
failed reads become unknown, never errors; the restore journal and the boot unit; and the plain
text and JSON forms."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from powersweep.sweep.gpu import ClockOffset, GpuIdentity, GpuSample, LockedClocks, PowerEnvelope
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.records.entry import JournalEntry, JournalGpu
from powersweep.sweep.records.journal import Journal
from powersweep.sweep.settings.boot_unit import BootSetting, UnitStatus
from powersweep.sweep.settings.card_status import (
    GpuStatus,
    JournalStatus,
    read_gpu_status,
    read_journal_status,
    render_status,
)
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


def _gpu_status(**kw: object) -> GpuStatus:
    base: dict[str, object] = dict(
        index=0,
        identity=GpuIdentity(0, "NVIDIA GeForce RTX 3090", UUID, 24576, "570.1"),
        envelope=PowerEnvelope(100.0, 350.0, 390.0, 290.0),
        envelope_error=None,
        persistence_mode=True,
        locked_clocks=LockedClocks(True, 1410.0, None),
        sample=GpuSample(0, 250.0, 1.0, 61.4, 1410.0, 9501.0, 97.0, 2, 0, power_instant_w=262.47),
    )
    return GpuStatus(**{**base, **kw})  # type: ignore[arg-type]


def test_every_card_is_read_and_a_card_without_limits_is_not_an_error() -> None:
    backend = NvmlBackend(
        nvml=FakeNvml(
            [
                FakeDevice(uuid=UUID, limit_mw=290_000, persistence_mode=1),
                FakeDevice(uuid="GPU-b", power_managed=False, persistence_supported=False),
            ]
        )
    )
    first, second = read_gpu_status(backend)
    assert first.identity is not None and first.identity.uuid == UUID
    assert first.envelope == PowerEnvelope(100.0, 350.0, 390.0, 290.0)
    assert first.persistence_mode is True and first.limit_differs_from_default
    assert first.locked_clocks.known is False  # NVML cannot read locks
    assert second.envelope is None and second.persistence_mode is None
    assert second.envelope_error is not None and "no settable power limit" in second.envelope_error
    assert second.limit_differs_from_default is None


def test_a_card_that_cannot_be_opened_or_identified_is_reported_unknown() -> None:
    lost = FakeDevice(fail={"nvmlDeviceGetName": fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    nvml = FakeNvml([FakeDevice(), lost])
    backend = NvmlBackend(nvml=nvml)
    opened = read_gpu_status(backend)
    assert opened[1].identity is None and opened[1].sample is not None
    nvml.fail["nvmlDeviceGetHandleByIndex"] = fake_pynvml.NVML_ERROR_UNKNOWN
    fresh = read_gpu_status(NvmlBackend(nvml=nvml))
    assert [(s.identity, s.envelope_error, s.sample) for s in fresh] == [
        (None, "cannot open", None),
        (None, "cannot open", None),
    ]


def test_the_json_form_has_nulls_for_what_is_unknown() -> None:
    sample = GpuSample(0, math.nan, math.nan, math.nan, 1410.0, math.nan, 97.0, None, None)
    data = _gpu_status(sample=sample, envelope=None, envelope_error="N/A").to_dict()
    assert data["power_limit"] == {
        "min_w": None,
        "default_w": None,
        "max_w": None,
        "current_w": None,
        "differs_from_default": None,
        "error": "N/A",
    }
    assert data["now"] == {
        "power_w": None,
        "temp_c": None,
        "sm_clock_mhz": 1410.0,
        "mem_clock_mhz": None,
        "util_pct": 97.0,
        "pstate": None,
    }
    json.dumps(data, allow_nan=False)  # strict JSON
    assert _gpu_status(identity=None, sample=None).to_dict()["now"] is None


def test_a_limit_within_half_a_watt_of_the_default_is_the_default() -> None:
    near = _gpu_status(envelope=PowerEnvelope(100.0, 350.0, 390.0, 350.4))
    assert near.limit_differs_from_default is False


def _running_entry(pid: int) -> JournalEntry:
    return JournalEntry(
        {"kind": "nvml"}, (JournalGpu(UUID, 0, "x", 350.0),), pid, "2026-05-01T10:00:00Z",
        run_dir="/runs/r1",
    )  # fmt: skip


def test_the_journal_status_says_whether_a_sweep_left_one_and_runs(tmp_path: Path) -> None:
    assert read_journal_status(tmp_path, lambda _p: True) == JournalStatus(
        Journal(tmp_path).path, False
    )
    Journal(tmp_path).write(_running_entry(4242))
    asked: list[int] = []
    running = read_journal_status(tmp_path, lambda p: asked.append(p) or True)
    assert (running.exists, running.pid, running.sweep_running, running.run_dir) == (
        True,
        4242,
        True,
        "/runs/r1",
    )
    assert asked == [4242]
    (tmp_path / "journal.json").write_text("{damaged")
    damaged = read_journal_status(tmp_path, lambda _p: True)
    assert damaged.exists is True and damaged.error is not None and "damaged" in damaged.error


def test_a_state_dir_that_cannot_be_looked_into_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def denied(self: Journal) -> bool:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Journal, "exists", denied)
    status = read_journal_status(tmp_path, lambda _p: True)
    assert (status.exists, status.error) == (None, "cannot look: Permission denied")


def test_the_text_names_every_reading_and_what_is_unknown() -> None:
    text = render_status([_gpu_status()], [], None)
    assert text.splitlines() == [
        f"GPU 0  NVIDIA GeForce RTX 3090  {UUID}",
        "  power limit   290 W in force (differs from the default); default 350 W, range 100-390 W",
        "  clock locks   SM 1410 MHz, memory unlocked",
        "  persistence   on",
        "  now           262.5 W, 61 C, SM 1410 MHz, memory 9501 MHz, util 97 %, P2",
    ]
    unknown = _gpu_status(
        identity=None,
        envelope=None,
        envelope_error="cannot open",
        persistence_mode=None,
        locked_clocks=LockedClocks(False, user_clock_setting_active=True),
        sample=GpuSample(0, math.nan, math.nan, math.nan, math.nan, math.nan, math.nan, None, 0),
    )
    assert render_status([unknown], [], None).splitlines()[:5] == [
        "GPU 0  (identity unknown)",
        "  power limit   unknown (cannot open)",
        "  clock locks   unknown (NVML cannot read clock locks); a user clock setting holds the "
        "clocks now",
        "  persistence   unknown",
        "  now           ? W, ? C, SM ? MHz, memory ? MHz, util ? %, P?",
    ]


def test_the_text_of_journals_and_the_boot_unit() -> None:
    path = Path("/var/lib/powersweep/journal.json")
    journals = [
        JournalStatus(path, None, error="Permission denied"),
        JournalStatus(path, False),
        JournalStatus(path, True, error="damaged"),
        JournalStatus(path, True, pid=7, sweep_running=True),
        JournalStatus(path, True, pid=7, sweep_running=False),
    ]
    unit = UnitStatus(
        Path("/etc/systemd/system/powersweep.service"),
        True,
        False,
        (BootSetting(UUID, "x", 290.0, sm_clock_mhz=1410.0),),
        True,
    )
    lines = render_status([], journals, unit).splitlines()
    assert lines == [
        f"restore journal: unknown at {path} (Permission denied; try with sudo)",
        f"restore journal: none ({path})",
        f"restore journal: PRESENT at {path}, unreadable (damaged)",
        f"restore journal: a sweep is running (pid 7, {path})",
        f"restore journal: PRESENT at {path}: a killed sweep left limits to put back: run "
        "`powersweep restore`",
        f"boot unit:       installed at {unit.path} (NOT enabled): {UUID} 290 W, SM 1410 MHz",
    ]
    absent = dataclasses.replace(unit, installed=False)
    assert render_status([], [], absent) == f"boot unit:       not installed ({unit.path})"
    broken = dataclasses.replace(unit, error="unreadable", enabled=None)
    assert render_status([], [], broken).endswith(
        f"installed at {unit.path}, unreadable (unreadable)"
    )
    empty = dataclasses.replace(unit, settings=(), enabled=None)
    assert render_status([], [], empty).endswith("(enabled state unknown): no powersweep settings")


def test_the_clock_offset_in_force_and_its_range_are_shown() -> None:
    offset = ClockOffset(True, 150.0, -200.0, 1000.0)
    lines = render_status([_gpu_status(clock_offset=offset)], [], None).splitlines()
    assert "  clock offset  SM +150 MHz (range -200 to +1000 MHz)" in lines
    assert _gpu_status(clock_offset=offset).to_dict()["clock_offset"] == {
        "supported": True,
        "sm_offset_mhz": 150.0,
        "min_mhz": -200.0,
        "max_mhz": 1000.0,
    }
    unsupported = ClockOffset(False, message="not on this card")
    text = render_status([_gpu_status(clock_offset=unsupported)], [], None)
    assert "  clock offset  not supported (not on this card)" in text.splitlines()
    unread = ClockOffset(True, None, message="driver failed")
    assert (
        "  clock offset  unknown (driver failed)"
        in render_status([_gpu_status(clock_offset=unread)], [], None).splitlines()
    )


def test_a_persisted_offset_shows_in_the_boot_units_line_and_its_json() -> None:
    unit = UnitStatus(
        Path("/etc/systemd/system/powersweep-apply.service"),
        True,
        True,
        (BootSetting(UUID, "x", 450.0, sm_clock_mhz=2790.0, sm_offset_mhz=180.0),),
        True,
    )
    assert render_status([], [], unit) == (
        f"boot unit:       installed at {unit.path} (enabled): {UUID} 450 W, SM 2790 MHz +180 MHz "
        "offset"
    )
    assert unit.to_dict()["settings"][0]["sm_offset_mhz"] == 180.0


def test_the_memory_clock_offset_shows_beside_the_sm_one_in_nvmls_unit() -> None:
    # issue 45: the memory offset in force, its range and its unit, in the text and the JSON
    sm, mem = ClockOffset(True, 150.0, -200.0, 1000.0), ClockOffset(True, 1000.0, -2000.0, 6000.0)
    status = _gpu_status(clock_offset=sm, mem_clock_offset=mem)
    lines = render_status([status], [], None).splitlines()
    at = lines.index("  clock offset  SM +150 MHz (range -200 to +1000 MHz)")
    assert lines[at + 1] == "  memory offset +1000 MHz (range -2000 to +6000 MHz, NVML unit)"
    assert status.to_dict()["mem_clock_offset"] == {
        "supported": True,
        "mem_offset_mhz": 1000.0,
        "min_mhz": -2000.0,
        "max_mhz": 6000.0,
    }
    unsupported = _gpu_status(mem_clock_offset=ClockOffset(False, message="not on this card"))
    text = render_status([unsupported], [], None).splitlines()
    assert "  memory offset not supported (not on this card)" in text
    unread = _gpu_status(mem_clock_offset=ClockOffset(True, None, message="driver failed"))
    assert (
        "  memory offset unknown (driver failed)" in render_status([unread], [], None).splitlines()
    )
    no_range = _gpu_status(mem_clock_offset=ClockOffset(True, 500.0))
    assert (
        "  memory offset +500 MHz (NVML unit)" in render_status([no_range], [], None).splitlines()
    )
    assert _gpu_status().to_dict()["mem_clock_offset"] is None  # not read: no line, null


def test_a_persisted_memory_offset_and_its_driver_show_in_the_boot_units_line() -> None:
    setting = BootSetting(
        UUID, "x", None, mem_offset_mhz=1000.0, offset_driver="570.133.07", vendor="nvidia"
    )
    unit = UnitStatus(
        Path("/etc/systemd/system/powersweep-apply.service"), True, True, (setting,), True
    )
    assert render_status([], [], unit) == (
        f"boot unit:       installed at {unit.path} (enabled): {UUID} +1000 MHz memory offset, "
        "offsets under driver 570.133.07 only"
    )
    data = unit.to_dict()["settings"][0]
    assert (data["mem_offset_mhz"], data["offset_driver"]) == (1000.0, "570.133.07")
