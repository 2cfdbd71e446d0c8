"""The Xid events of one NVIDIA GPU through NVML: the driver's reports of GPU faults (Xid 13 a
graphics engine exception, 31 an MMU fault, 43 the GPU stopped processing, 48 a double-bit ECC
error, 79 the card fell off the bus, ...), which an undervolt too deep provokes (issue 36).

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.nvidia.nvml_events".
"""

from __future__ import annotations

import contextlib
import threading
from types import ModuleType
from typing import Any

from powersweep.sweep.gpu.nvidia.nvml_api import same_device
from powersweep.sweep.gpu.nvidia.nvml_errors import nvml_read
from powersweep.sweep.gpu.protocol import Fault

# The most events one poll drains: a card in trouble can report an Xid storm, and a poll must
# return promptly; what is left stays queued in NVML for the next poll.
MAX_EVENTS_PER_POLL = 64


class NvmlXidEvents:
    """Watches one GPU's Xid events (:class:`~.nvml_gpu.NvmlGpu` hands them on).

    The event set is created and the card registered on the first :meth:`poll`, not at
    construction: most commands never ask, and a set holds driver resources until freed.

    Args:
        nvml: The ``pynvml`` module (or a fake with the same surface).
        handle: NVML device handle.

    Attributes:
        poll_errors: Polls (or attempts to arm the watch) that failed with an NVML error other
            than "not supported" or "no permission".
    """

    def __init__(self, nvml: ModuleType, handle: object) -> None:
        self._nvml = nvml
        self._handle = handle
        self._set: Any = None
        # True once NVML said this card cannot report Xids to this process: never asked again.
        self._unsupported = False
        self._closed = False
        # The sampler reads from its own thread; a poll racing close() must not use a freed set.
        self._lock = threading.Lock()
        self.poll_errors = 0

    @property
    def supported(self) -> bool | None:
        """False once NVML said this card cannot report Xids here (not supported, no
        permission); None before the first poll; True once the watch is armed."""
        if self._unsupported:
            return False
        return None if self._set is None else True

    def poll(self) -> tuple[int, ...] | None:
        """The Xids this card reported since the last poll (empty: none).

        The first poll registers the card and returns ``()`` (events before the registration
        are not delivered). At most :data:`MAX_EVENTS_PER_POLL` events are drained per poll; an
        event of another card (never expected, the set holds only this one) is skipped.

        Returns:
            The Xid codes in the order the driver reported them; None when they cannot be read:
            NVML does not support Xid events on this card or driver, the process may not
            register for them, the poll failed (counted in ``poll_errors``), or the watch is
            closed. A poll that fails after draining some Xids returns those (an Xid is
            conclusive; the failure still counts).
        """
        with self._lock:
            if self._unsupported or self._closed:
                return None
            if self._set is None:
                return () if self._arm() else None
            return self._drain()

    def close(self) -> None:
        """Free the event set (before NVML shuts down); later polls return None. Idempotent."""
        with self._lock:
            self._closed = True
            event_set, self._set = self._set, None
            if event_set is not None:
                self._free(event_set)

    # --- internals (lock held) ----------------------------------------------------------------

    def _arm(self) -> bool:
        """Create the event set and register the card for Xid events; False when not done
        (``_unsupported`` set when it never will be, ``poll_errors`` counted when it failed)."""
        nvml, h = self._nvml, self._handle
        types = nvml_read(nvml, lambda: int(nvml.nvmlDeviceGetSupportedEventTypes(h)), self._fault)
        if types is not None and not types & nvml.nvmlEventTypeXidCriticalError:
            self._unsupported = True
            return False
        event_set = None if types is None else nvml_read(nvml, nvml.nvmlEventSetCreate, self._fault)
        if event_set is None:
            return False
        # Some cards list the event type and still refuse it (WSL, some GeForce drivers).
        if nvml_read(nvml, lambda: self._register(event_set), self._fault) is None:
            self._free(event_set)
            return False
        self._set = event_set
        return True

    def _register(self, event_set: Any) -> bool:
        nvml = self._nvml
        nvml.nvmlDeviceRegisterEvents(self._handle, nvml.nvmlEventTypeXidCriticalError, event_set)
        return True

    def _fault(self, fault: Fault) -> None:
        """Unsupported or no permission mean "never here"; another fault, "failed this time"."""
        if fault in ("unsupported", "no_permission"):
            self._unsupported = True
        else:
            self.poll_errors += 1

    def _drain(self) -> tuple[int, ...] | None:
        nvml = self._nvml
        xids: list[int] = []
        for _ in range(MAX_EVENTS_PER_POLL):
            try:
                data = nvml.nvmlEventSetWait_v2(self._set, 0)
            except nvml.NVMLError as exc:
                # A timeout is how NVML says the set is empty: the normal end of a drain.
                if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                    break
                self.poll_errors += 1
                return tuple(xids) if xids else None
            is_xid = int(data.eventType) & nvml.nvmlEventTypeXidCriticalError
            if is_xid and same_device(data.device, self._handle):
                xids.append(int(data.eventData))
        return tuple(xids)

    def _free(self, event_set: Any) -> None:
        nvml = self._nvml
        # Freeing is cleanup: a failure leaves nothing the caller could act on.
        with contextlib.suppress(nvml.NVMLError):
            nvml.nvmlEventSetFree(event_set)
