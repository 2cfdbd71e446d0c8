"""A card's Xid events through NVML (``sweep/gpu/nvidia/nvml_events.py``) against the fake pynvml:
the watch armed on the first call, each Xid returned once, at most a bounded number per call, only
this card's, and None (never an exception) where NVML cannot report them; the event set freed
when the backend closes."""

from __future__ import annotations

import pytest

from powersweep.sweep.gpu.nvidia.nvml_api import same_device
from powersweep.sweep.gpu.nvidia.nvml_events import MAX_EVENTS_PER_POLL, NvmlXidEvents
from powersweep.sweep.gpu.nvml import NvmlBackend, NvmlGpu
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeEventData, FakeNvml

XID = fake_pynvml.nvmlEventTypeXidCriticalError


def _gpus(*devices: FakeDevice) -> tuple[FakeNvml, NvmlBackend, list[NvmlGpu]]:
    fake = FakeNvml(list(devices) or [FakeDevice()])
    backend = NvmlBackend(nvml=fake)
    return fake, backend, [backend.gpu(i) for i in range(len(fake.devices))]


def _armed(**device: object) -> tuple[FakeNvml, NvmlBackend, NvmlGpu]:
    fake, backend, (gpu,) = _gpus(FakeDevice(**device))  # type: ignore[arg-type]
    assert gpu.xid_events() == ()
    return fake, backend, gpu


def test_the_first_call_registers_for_xids_and_each_xid_is_returned_once() -> None:
    fake, _, gpu = _armed()
    (event_set,) = fake.event_sets
    assert event_set.registered == [(fake.devices[0], XID)]
    assert gpu.xid_events() == ()
    fake.inject_xid(0, 13)
    fake.inject_xid(0, 79)
    assert gpu.xid_events() == (13, 79)
    assert gpu.xid_events() == ()
    # one set for the card, whatever the number of calls; each poll ends at NVML's timeout
    assert fake.calls_to("nvmlEventSetCreate") == 1
    assert fake.calls_to("nvmlDeviceRegisterEvents") == 1
    assert gpu.read_error_count == 0


def test_an_xid_before_the_first_call_is_not_seen_as_with_nvml() -> None:
    fake, _, (gpu,) = _gpus(FakeDevice())
    assert fake.inject_xid(0, 43) == 0  # nothing registered yet: the driver delivers it nowhere
    assert gpu.xid_events() == ()
    assert gpu.xid_events() == ()


def test_a_card_without_xid_events_is_none_and_never_asked_again() -> None:
    fake, _, (gpu,) = _gpus(FakeDevice(xid_events_supported=False))
    assert gpu.xid_events() is None
    assert gpu.xid_events() is None
    assert fake.calls_to("nvmlDeviceGetSupportedEventTypes") == 1
    assert fake.event_sets == [] and gpu.read_error_count == 0


@pytest.mark.parametrize(
    "code",
    [
        fake_pynvml.NVML_ERROR_NOT_SUPPORTED,
        fake_pynvml.NVML_ERROR_NO_PERMISSION,
        fake_pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
    ],
)
@pytest.mark.parametrize("call", ["nvmlDeviceGetSupportedEventTypes", "nvmlDeviceRegisterEvents"])
def test_a_refused_registration_is_none_for_good_and_frees_its_set(call: str, code: int) -> None:
    # WSL and some GeForce drivers list the event type and still refuse it; without root some
    # drivers refuse the registration
    fake, _, (gpu,) = _gpus(FakeDevice(fail={call: code}))
    assert gpu.xid_events() is None
    assert gpu.xid_events() is None
    assert fake.calls_to(call) == 1
    assert all(s.freed for s in fake.event_sets)
    assert gpu.read_error_count == 0  # a capability, not a failed read


def test_an_event_set_nvml_cannot_create_for_this_process_is_none_for_good() -> None:
    fake, _, (gpu,) = _gpus(FakeDevice())
    fake.fail["nvmlEventSetCreate"] = fake_pynvml.NVML_ERROR_NO_PERMISSION
    assert gpu.xid_events() is None
    del fake.fail["nvmlEventSetCreate"]
    assert gpu.xid_events() is None and fake.calls_to("nvmlEventSetCreate") == 1


def test_a_registration_that_fails_is_none_counted_and_tried_again() -> None:
    fake, _, (gpu,) = _gpus(FakeDevice(fail={"nvmlDeviceRegisterEvents": 999}))
    assert gpu.xid_events() is None
    assert gpu.read_error_count == 1 and fake.event_sets[0].freed
    del fake.devices[0].fail["nvmlDeviceRegisterEvents"]
    assert gpu.xid_events() == ()
    fake.inject_xid(0, 31)
    assert gpu.xid_events() == (31,)
    assert gpu.read_error_count == 1


def test_a_failed_poll_is_none_and_counted_and_the_next_one_reads_on() -> None:
    fake, _, gpu = _armed()
    fake.fail["nvmlEventSetWait_v2"] = fake_pynvml.NVML_ERROR_UNKNOWN
    fake.inject_xid(0, 48)
    assert gpu.xid_events() is None
    assert gpu.read_error_count == 1
    del fake.fail["nvmlEventSetWait_v2"]
    assert gpu.xid_events() == (48,)  # the event waited in NVML's queue


def test_a_poll_that_fails_after_draining_xids_returns_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, _, gpu = _armed()
    fake.inject_xid(0, 79)
    wait = fake.nvmlEventSetWait_v2

    def fail_second(event_set: object, timeout_ms: int) -> FakeEventData:
        if fake.calls_to("nvmlEventSetWait_v2") >= 1:  # the second wait fails
            raise fake_pynvml.make_error(fake_pynvml.NVML_ERROR_GPU_IS_LOST)
        return wait(event_set, timeout_ms)

    monkeypatch.setattr(fake, "nvmlEventSetWait_v2", fail_second)
    assert gpu.xid_events() == (79,)
    assert gpu.read_error_count == 1


def test_events_of_another_card_or_of_another_type_are_skipped() -> None:
    fake, _, gpus = _gpus(FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b"))
    assert [g.xid_events() for g in gpus] == [(), ()]
    first, second = fake.event_sets
    # NVML would not put them there; the card's own events are picked out all the same
    first.queue.append(FakeEventData(fake.devices[1], XID, 13))
    first.queue.append(FakeEventData(fake.devices[0], fake_pynvml.nvmlEventTypePState, 2))
    first.queue.append(FakeEventData(fake.devices[0], XID, 31))
    assert fake.inject_xid(1, 43) == 1
    assert gpus[0].xid_events() == (31,)
    assert gpus[1].xid_events() == (43,)
    assert not first.queue and not second.queue


def test_one_call_drains_a_bounded_number_and_leaves_the_rest_for_the_next() -> None:
    fake, _, gpu = _armed()
    for _ in range(MAX_EVENTS_PER_POLL + 5):
        fake.inject_xid(0, 13)
    waits = fake.calls_to("nvmlEventSetWait_v2")
    assert gpu.xid_events() == (13,) * MAX_EVENTS_PER_POLL
    assert fake.calls_to("nvmlEventSetWait_v2") - waits == MAX_EVENTS_PER_POLL
    assert gpu.xid_events() == (13,) * 5


def test_the_backend_frees_every_event_set_before_nvml_shuts_down() -> None:
    fake, backend, gpus = _gpus(FakeDevice(uuid="GPU-a"), FakeDevice(uuid="GPU-b"))
    gpus[0].xid_events()  # only the first card was asked: only it holds a set
    (event_set,) = fake.event_sets
    backend.close()
    assert event_set.freed and fake.calls_to("nvmlEventSetFree") == 1
    names = [name for name, _ in fake.calls]
    assert names.index("nvmlEventSetFree") < names.index("nvmlShutdown")
    assert gpus[0].xid_events() is None and gpus[1].xid_events() is None
    backend.close()
    assert fake.calls_to("nvmlEventSetFree") == 1


def test_a_failing_free_is_swallowed() -> None:
    fake, backend, _ = _armed()
    fake.fail["nvmlEventSetFree"] = fake_pynvml.NVML_ERROR_UNKNOWN
    backend.close()
    assert fake.shutdown_calls == 1


def test_the_watch_reports_whether_it_is_supported() -> None:
    fake = FakeNvml([FakeDevice(), FakeDevice(uuid="GPU-b", xid_events_supported=False)])
    fake.nvmlInit()
    watches = [NvmlXidEvents(fake, device) for device in fake.devices]
    assert [w.supported for w in watches] == [None, None]
    assert [w.poll() for w in watches] == [(), None]
    assert [w.supported for w in watches] == [True, False]
    watches[0].close()
    assert watches[0].poll() is None and fake.event_sets[0].freed


def test_real_event_data_names_its_card_by_a_pointer_compared_by_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes

    import pynvml

    def card(address: int) -> object:  # an opaque handle, as NVML hands them out
        return ctypes.cast(ctypes.c_void_p(address), pynvml.c_nvmlDevice_t)

    handle = card(0x1000)
    data = pynvml.c_nvmlEventData_t()
    data.device, data.eventType, data.eventData = handle, XID, 79
    assert data.device is not handle and data.device != handle  # a new pointer object
    assert same_device(data.device, handle)
    assert same_device(data.device, card(0x1000))
    assert not same_device(data.device, card(0x2000))
    assert not same_device(data.device, ctypes.c_void_p(0))
    # a real event fed through the watch: the field names match and the card is recognized
    fake = FakeNvml()
    fake.nvmlInit()
    watch = NvmlXidEvents(fake, handle)
    # the fake knows only its own devices: this real handle is registered without its checks
    monkeypatch.setattr(fake, "nvmlDeviceGetSupportedEventTypes", lambda handle: XID)
    monkeypatch.setattr(fake, "nvmlDeviceRegisterEvents", lambda handle, types, event_set: None)
    assert watch.poll() == ()
    fake.event_sets[0].queue.append(data)
    assert watch.poll() == (79,)


def test_the_fakes_event_types_and_event_fields_are_nvmls() -> None:
    import pynvml

    names = [n for n in dir(FakeNvml) if n.startswith("nvmlEventType")]
    assert len(names) >= 5
    assert {n: getattr(FakeNvml, n) for n in names} == {n: getattr(pynvml, n) for n in names}
    real = [name for name, _ in pynvml.c_nvmlEventData_t._fields_]
    assert list(FakeEventData.__dataclass_fields__) == real
