"""The restore journal, the pre-change permission check and sudo ownership."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from powersweep.errors import GpuError, PowersweepError, UsageError
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.gpu_choice import check_settable
from powersweep.sweep.records.journal import (
    ROOT_STATE_DIR,
    Journal,
    JournalEntry,
    JournalGpu,
    default_state_dir,
    restore_gpus,
)
from powersweep.sweep.records.ownership import Owner, hand_over, invoking_user
from tests.fakes.fake_pynvml import NVML_ERROR_NO_PERMISSION, FakeDevice, FakeNvml


def entry(*gpus: tuple[str, int, float]) -> JournalEntry:
    return JournalEntry(
        backend={"kind": "nvml"},
        gpus=tuple(JournalGpu(u, i, f"card {i}", w) for u, i, w in gpus),
        pid=4242,
        created_at="2026-01-01T00:00:00Z",
        run_dir="/runs/x",
    )


def test_write_read_roundtrip_is_private_and_atomic(tmp_path: Path) -> None:
    j = Journal(tmp_path / "state")
    assert j.read() is None and not j.exists()
    e = entry(("GPU-a", 0, 350.0), ("GPU-b", 1, 300.5))
    j.write(e)
    assert j.read() == e
    assert stat.S_IMODE(j.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(j.state_dir.stat().st_mode) == 0o700
    assert os.listdir(j.state_dir) == ["journal.json"]  # no temp file left behind
    data = json.loads(j.path.read_text())
    assert data["gpus"][1] == {
        "uuid": "GPU-b",
        "index": 1,
        "name": "card 1",
        "original_limit_w": 300.5,
    }
    j.remove()
    j.remove()  # idempotent
    assert not j.exists()


def test_refuses_while_present_and_points_at_restore(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.refuse_if_present()
    j.write(entry(("GPU-a", 0, 350.0)))
    with pytest.raises(UsageError, match="powersweep restore"):
        j.refuse_if_present()


@pytest.mark.parametrize("text", ["", "{", "[]", '{"version": 99}', '{"version": 1}'])
def test_damaged_journal_is_one_actionable_error(tmp_path: Path, text: str) -> None:
    j = Journal(tmp_path)
    j.path.write_text(text)
    with pytest.raises(PowersweepError, match=r"damaged.*nvidia-smi"):
        j.read()


def test_unwritable_state_dir_fails_before_any_change(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(PowersweepError, match="no power limit was changed"):
        Journal(blocker).write(entry(("GPU-a", 0, 350.0)))


def test_default_state_dir() -> None:
    assert default_state_dir({"POWERSWEEP_STATE_DIR": "/x"}, euid=0) == Path("/x")
    assert default_state_dir({"HOME": "/home/u"}, euid=0) == ROOT_STATE_DIR
    assert default_state_dir({"XDG_STATE_HOME": "/s"}, euid=1000) == Path("/s/powersweep")
    assert default_state_dir({"HOME": "/home/u"}, euid=1000) == Path(
        "/home/u/.local/state/powersweep"
    )


def test_restore_finds_gpus_by_uuid_not_index() -> None:
    # the cards swapped indices since the sweep (a reboot, another slot order)
    devs = [
        FakeDevice(uuid="GPU-b", limit_mw=250_000),
        FakeDevice(uuid="GPU-a", limit_mw=260_000),
    ]
    backend = NvmlBackend(nvml=FakeNvml(devices=devs))
    results = restore_gpus(
        entry(("GPU-a", 0, 350.0), ("GPU-b", 1, 300.0), ("GPU-gone", 2, 200.0)), backend
    )
    assert [d.limit_mw for d in devs] == [300_000, 350_000]
    assert [(r.uuid, r.index, r.ok) for r in results] == [
        ("GPU-a", 1, True),
        ("GPU-b", 0, True),
        ("GPU-gone", None, False),
    ]
    assert results[2].message == "GPU not found"


def test_check_settable_names_missing_permission_and_changes_nothing() -> None:
    dev = FakeDevice(limit_mw=350_000)
    fake = FakeNvml(devices=[dev])
    backend = NvmlBackend(nvml=fake)
    check_settable([backend.gpu(0)])  # allowed: sets the limit in force, nothing else
    assert dev.limit_mw == 350_000
    dev.fail["nvmlDeviceSetPowerManagementLimit"] = NVML_ERROR_NO_PERMISSION
    with pytest.raises(GpuError, match="needs root"):
        check_settable([backend.gpu(0)])
    assert dev.limit_mw == 350_000


def test_check_settable_refuses_a_gpu_without_power_management() -> None:
    fake = FakeNvml(devices=[FakeDevice(power_managed=False)])
    with pytest.raises(GpuError, match="no settable power limit"):
        check_settable([NvmlBackend(nvml=fake).gpu(0)])
    assert not any(n == "nvmlDeviceSetPowerManagementLimit" for n, _ in fake.calls)


def test_invoking_user() -> None:
    assert invoking_user({"SUDO_UID": "1000", "SUDO_GID": "100"}) == Owner(1000, 100)
    assert invoking_user({}) is None
    assert invoking_user({"SUDO_UID": "x", "SUDO_GID": "100"}) is None


def test_hand_over_walks_the_tree_without_following_links(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "charts").mkdir(parents=True)
    (run / "caps.csv").write_text("x")
    (run / "charts" / "a.png").write_text("x")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("x")
    (run / "link").symlink_to(outside)
    calls: list[tuple[str, int, int]] = []
    n = hand_over([run], Owner(7, 8), chown=lambda p, u, g: calls.append((p, u, g)))
    names = sorted(Path(p).relative_to(tmp_path).as_posix() for p, _, _ in calls)
    assert names == ["run", "run/caps.csv", "run/charts", "run/charts/a.png", "run/link"]
    assert n == 5 and {(u, g) for _, u, g in calls} == {(7, 8)}
    assert hand_over([run], None) == 0


def test_hand_over_failure_is_a_warning(tmp_path: Path) -> None:
    warnings: list[str] = []

    def deny(_p: str, _u: int, _g: int) -> None:
        raise PermissionError(1, "Operation not permitted")

    assert hand_over([tmp_path], Owner(1, 1), chown=deny, warn=warnings.append) == 0
    assert len(warnings) == 1 and "Operation not permitted" in warnings[0]
