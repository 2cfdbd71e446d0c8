"""Which GPUs of this machine a setting goes to (``sweep/settings/targets.py``), on the fake
pynvml: ``--gpus`` parsed, cards that cannot be identified skipped, the user's choice in order
and once each, and a run's cards matched (or a different card refused unless forced)."""

from __future__ import annotations

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.gpu import GpuIdentity
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.settings.recommendation import MeasuredGpu
from powersweep.sweep.settings.targets import (
    describe,
    machine_gpus,
    match_run_gpus,
    parse_gpu_selection,
    select_gpus,
)
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
AMD_UUID = "1fff74a1-0000-1000-8000-000000000000"
RTX3090 = "NVIDIA GeForce RTX 3090"


def _nvml_backend(*devices: FakeDevice) -> NvmlBackend:
    return NvmlBackend(nvml=FakeNvml(devices=list(devices)))


def test_gpus_takes_indices_nvidia_and_amd_uuids() -> None:
    assert parse_gpu_selection(f"0,{AMD_UUID}, GPU-x ,") == ("0", AMD_UUID, "GPU-x")


@pytest.mark.parametrize("text", ["-1", "1.5", "gpu0", "1fff74a1-0000", " , "])
def test_gpus_refuses_anything_else_naming_the_text(text: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_gpu_selection(text)
    assert str(info.value) == (
        f"--gpus takes GPU indices and/or UUIDs separated by commas (e.g. 0,1), not {text!r}"
    )


def test_a_card_that_cannot_be_identified_is_skipped_with_a_warning() -> None:
    lost = FakeDevice(uuid=UUID_B, fail={"nvmlDeviceGetUUID": fake_pynvml.NVML_ERROR_GPU_IS_LOST})
    warnings: list[str] = []
    found = machine_gpus(_nvml_backend(FakeDevice(uuid=UUID_A), lost), warnings.append)
    assert [ident.uuid for _, ident in found] == [UUID_A]
    assert warnings == ["skipping GPU 1: cannot identify GPU 1: NVML error: GPU is lost"]


def test_the_cards_named_come_in_order_once_each() -> None:
    backend = _nvml_backend(FakeDevice(uuid=UUID_A), FakeDevice(uuid=UUID_B))
    picked = select_gpus(backend, ("1", "0", UUID_B.lower(), "1"), lambda _m: None)
    assert [(t.identity.index, t.matched_by, t.measured) for t in picked] == [
        (1, "named", None),
        (0, "named", None),
    ]
    assert picked[0].label == f"GPU 1 ({RTX3090}, {UUID_B})"


def test_a_card_not_here_lists_the_cards_that_are() -> None:
    backend = _nvml_backend(FakeDevice(uuid=UUID_A))
    with pytest.raises(UsageError) as info:
        select_gpus(backend, (UUID_B,), lambda _m: None)
    assert str(info.value) == f"there is no GPU {UUID_B} (GPUs here: 0 {RTX3090} {UUID_A})"


def test_one_card_needs_no_warning_and_no_card_is_an_error() -> None:
    warnings: list[str] = []
    assert len(select_gpus(_nvml_backend(FakeDevice(uuid=UUID_A)), None, warnings.append)) == 1
    assert warnings == []
    with pytest.raises(UsageError, match=r"^no GPU found$"):
        select_gpus(_nvml_backend(), None, lambda _m: None)
    with pytest.raises(UsageError, match=r"^no GPU found$"):
        match_run_gpus(_nvml_backend(), [MeasuredGpu(0, RTX3090, UUID_A)], warn=lambda _m: None)


def test_a_card_named_with_a_run_is_matched_by_uuid_or_forced_as_a_stand_in() -> None:
    backend = _nvml_backend(FakeDevice(uuid=UUID_A), FakeDevice(uuid=UUID_B))
    measured = [MeasuredGpu(3, RTX3090, UUID_A)]
    (same,) = match_run_gpus(backend, measured, selection=("0",), warn=lambda _m: None)
    assert (same.matched_by, same.measured) == ("uuid", measured[0])
    warnings: list[str] = []
    (other,) = match_run_gpus(backend, measured, selection=("1",), force=True, warn=warnings.append)
    assert (other.identity.uuid, other.matched_by, other.measured) == (
        UUID_B,
        "forced",
        measured[0],
    )
    assert warnings == [
        f"GPU 1 ({RTX3090}, {UUID_B}) is not the card the run measured ({RTX3090}, {UUID_A}): "
        "the same model but another card; applying anyway (--force)"
    ]


def test_a_run_that_names_one_card_twice_sets_it_once() -> None:
    backend = _nvml_backend(FakeDevice(uuid=UUID_A))
    measured = [MeasuredGpu(0, RTX3090, UUID_A), MeasuredGpu(0, RTX3090, None)]
    targets = match_run_gpus(backend, measured, warn=lambda _m: None)
    assert [(t.identity.uuid, t.matched_by) for t in targets] == [(UUID_A, "uuid")]


def test_a_missing_card_without_a_recorded_uuid_says_so() -> None:
    backend = _nvml_backend(FakeDevice(uuid=UUID_A))
    with pytest.raises(UsageError) as info:
        match_run_gpus(backend, [MeasuredGpu(4, RTX3090, None)], warn=lambda _m: None)
    assert str(info.value) == (
        f"the run measured GPU 4 ({RTX3090}, no UUID recorded), which is not on this machine "
        f"(GPUs here: 0 {RTX3090} {UUID_A})"
    )


def test_describe_names_index_model_and_uuid() -> None:
    ident = GpuIdentity(2, "AMD Instinct MI300X", AMD_UUID, 196592, "6.10.5", "amd")
    assert describe(ident) == f"GPU 2 (AMD Instinct MI300X, {AMD_UUID})"
