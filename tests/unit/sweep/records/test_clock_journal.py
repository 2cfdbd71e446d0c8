"""Clock locks in the restore journal: recorded before the first change, put back by restore
(relocked where the originals were read, reset where NVML could not read them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.records.journal import Journal, JournalEntry, JournalGpu, restore_gpus
from tests.fakes.fake_pynvml import NVML_ERROR_NO_PERMISSION, FakeDevice, FakeNvml

UUID = "GPU-00000000-0000-0000-0000-000000000000"


def _locked_entry(**locks: object) -> JournalEntry:
    return JournalEntry(
        backend={"kind": "nvml"},
        gpus=(JournalGpu(UUID, 0, "card", 350.0, **locks),),  # type: ignore[arg-type]
        pid=1,
        created_at="2026-01-01T00:00:00Z",
    )


def test_locks_roundtrip_and_an_old_journal_reads_as_no_locks(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    e = _locked_entry(clocks_locked=True, original_sm_lock_mhz=1500.0, locks_known=True)
    j.write(e)
    assert j.read() == e and j.read().holds_clock_locks  # type: ignore[union-attr]
    data = json.loads(j.path.read_text())
    assert data["gpus"][0]["original_mem_lock_mhz"] is None
    # a journal written by a power sweep (or an older powersweep) has no lock keys
    for key in ("clocks_locked", "original_sm_lock_mhz", "original_mem_lock_mhz", "locks_known"):
        data["gpus"][0].pop(key)
    j.path.write_text(json.dumps(data))
    old = j.read()
    assert old is not None and not old.holds_clock_locks
    j.refuse_if_locked()  # no locks: --force may go on


def test_a_journal_holding_locks_refuses_even_forced_sweeps(tmp_path: Path) -> None:
    j = Journal(tmp_path)
    j.write(_locked_entry(clocks_locked=True))
    with pytest.raises(UsageError, match="powersweep restore"):
        j.refuse_if_locked()


def test_restore_resets_nvml_locks_it_could_not_read_and_puts_the_limit_back() -> None:
    fake = FakeNvml(devices=[FakeDevice(limit_mw=300_000, locked_sm=(900, 900))])
    fake.devices[0].locked_mem = (5001, 5001)
    with NvmlBackend(nvml=fake) as backend:
        (r,) = restore_gpus(_locked_entry(clocks_locked=True, locks_known=False), backend)
    assert r.ok and "unlocked" in r.clocks
    assert fake.devices[0].locked_sm is None and fake.devices[0].locked_mem is None
    assert fake.devices[0].limit_mw == 350_000


def test_restore_relocks_what_the_card_had_before() -> None:
    fake = FakeNvml(devices=[FakeDevice(locked_sm=(900, 900))])
    with NvmlBackend(nvml=fake) as backend:
        (r,) = restore_gpus(
            _locked_entry(
                clocks_locked=True, original_sm_lock_mhz=1410.0, original_mem_lock_mhz=9501.0
            ),
            backend,
        )
    assert r.ok and r.clocks == "clocks locked back to SM 1410 MHz / memory 9501 MHz"
    assert fake.devices[0].locked_sm == (1410, 1410)
    assert fake.devices[0].locked_mem == (9501, 9501)


def test_a_failed_lock_reset_keeps_the_journal_result_failed() -> None:
    fake = FakeNvml(devices=[FakeDevice(locked_sm=(900, 900))])
    fake.devices[0].fail["nvmlDeviceResetGpuLockedClocks"] = NVML_ERROR_NO_PERMISSION
    with NvmlBackend(nvml=fake) as backend:
        (r,) = restore_gpus(_locked_entry(clocks_locked=True, locks_known=False), backend)
    assert not r.ok and "NOT put back" in r.clocks and "sudo" in r.clocks
    assert fake.devices[0].limit_mw == 350_000  # the limit still came back


def test_samples_and_requests_carry_the_point_locks_and_old_runs_keep_their_columns(
    tmp_path: Path,
) -> None:
    import csv
    from types import SimpleNamespace

    from powersweep.runformat import REQUESTS_COLUMNS, SAMPLES_COLUMNS
    from powersweep.sweep.gpu import GpuSample
    from powersweep.sweep.records.writer import RunWriter
    from powersweep.sweep.sampling.sampler import SampleRow

    sample = GpuSample(0, 300.0, 1.0, 60.0, 1410.0, 9501.0, 97.0, 2, 0)
    request = SimpleNamespace(
        prompt_kind="narr",
        stream=0,
        t_start_s=0.0,
        t_first_token_s=0.1,
        t_last_token_s=1.0,
        t_end_s=1.0,
        prompt_tokens=10,
        completion_tokens=20,
        token_source="usage",
        chunk_tokens=20,
        decode_tps=21.0,
        finish_reason="length",
        ok=True,
        error="",
    )
    writer = RunWriter(tmp_path, ["card"], "decode-single")
    writer.append_samples([SampleRow(0.0, 0, 350.0, "narr", sample, 1410.0, 9501.0)])
    writer.append_requests(350.0, [request], (1410.0, 9501.0))
    with open(writer.path / "samples.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert (row["sm_lock_mhz"], row["mem_lock_mhz"]) == ("1410.0", "9501.0")
    with open(writer.path / "requests.csv", newline="") as f:
        (req,) = list(csv.DictReader(f))
    assert (req["sm_lock_mhz"], req["mem_lock_mhz"]) == ("1410.0", "9501.0")

    # a run from before the lock columns: resuming appends rows its header can read
    old = tmp_path / "old"
    old.mkdir()
    (old / "samples.csv").write_text(",".join(SAMPLES_COLUMNS[:-2]) + "\n")
    (old / "requests.csv").write_text(",".join(REQUESTS_COLUMNS[:-2]) + "\n")
    (old / "caps.csv").write_text("cap_w,narr_tps,power_w\n")
    again = RunWriter.reopen(old)
    again.append_samples([SampleRow(0.0, 0, 350.0, "narr", sample)])
    again.append_requests(350.0, [request])
    for name, columns in (("samples.csv", SAMPLES_COLUMNS), ("requests.csv", REQUESTS_COLUMNS)):
        with open(old / name, newline="") as f:
            rows = list(csv.reader(f))
        assert all(len(r) == len(columns) - 2 for r in rows), name
