"""What a sweep runs on: the GPU backend, the clock, and what a simulated rig adds.

The composition root (:mod:`powersweep.cli.rigs`) builds a :class:`Rig` from the options, real
(NVML) or simulated; the session and the driver only receive one. So the sweep never imports
:mod:`powersweep.sim`, and a new kind of rig is a change to the composition root alone.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from powersweep.clock import Clock
from powersweep.sweep.gpu import GpuBackend
from powersweep.sweep.options import SweepOptions
from powersweep.sweep.server.transport import (
    CONNECT_TIMEOUT_S,
    READ_TIMEOUT_S,
    Connector,
    LeanTransport,
)

# A rig's noise-free answer for the planned caps and the load's set-up (probe, calibration).
TruthFn = Callable[[Sequence[float], Mapping[str, Any]], "dict[str, Any] | None"]
# The noise-free answer of a clock sweep: ``(sm_lock_mhz, mem_lock_mhz)`` points, the limit held
# (W per GPU) and the load's set-up.
ClockTruthFn = Callable[
    [Sequence[tuple[float | None, float | None]], float, Mapping[str, Any]],
    "dict[str, Any] | None",
]


def _no_server() -> AbstractContextManager[str | None]:
    return contextlib.nullcontext(None)


def _same_client(client: Any) -> Any:
    return client


@dataclass(frozen=True)
class Rig:
    """A GPU backend with the clock it runs on, and what a simulated rig brings along.

    Attributes:
        backend: The GPUs.
        clock: Run clock (real time, or scaled for a simulation).
        journal_backend: How ``powersweep restore`` rebuilds this backend after a SIGKILL
            (stored in the restore journal).
        serve: Starts the server the rig brings (the simulated one) and yields its URL; yields
            None when the sweep talks to ``--url`` or a discovered server.
        wrap_client: Wraps the chat client (a simulated GPU driven by a real server's requests).
        simulation: ``run.json``'s ``simulation`` facts (profile, seed, time scale, server
            flavour); None on real hardware.
        truth: The simulator's noise-free answer for the caps and the load's set-up; None on
            real hardware.
        clock_truth: The same for a clock sweep's lock points; None on real hardware.
        connector: How the client reaches the rig's own server without a socket (the
            simulated rig on virtual time, where client and server share one event loop);
            None: real sockets.
        limits_outlive_process: A limit the sweep sets stays after the process ends (real
            cards, or simulated ones whose settings persist in a file): the sweep then keeps a
            restore journal.
        load_seed: Seed of the generated prompt bodies (the simulated rig's ``--seed``, so a
            seed reproduces a run; 0 on real hardware).
        recorded_options: The rig's own settings, recorded among ``run.json``'s options (the
            simulated rig's, under their flag names; empty on real hardware).
        tps_follows_card: The server's token rate follows the cards' clocks (False: a
            simulated card beside a real server, whose speed the card does not set).
    """

    backend: GpuBackend
    clock: Clock
    journal_backend: Mapping[str, Any] = field(default_factory=lambda: {"kind": "nvml"})
    serve: Callable[[], AbstractContextManager[str | None]] = _no_server
    wrap_client: Callable[[Any], Any] = _same_client
    simulation: Mapping[str, Any] | None = None
    truth: TruthFn | None = None
    clock_truth: ClockTruthFn | None = None
    connector: Connector | None = None
    limits_outlive_process: bool = True
    load_seed: int = 0
    tps_follows_card: bool = True
    recorded_options: Mapping[str, Any] = field(default_factory=dict)

    def transport(self, max_connections: int = 8) -> LeanTransport | None:
        """The HTTP transport of a client outside the chat client (discovery): over
        :attr:`connector` when the rig has one, else None (httpx's own)."""
        if self.connector is None:
            return None
        return LeanTransport(
            max_connections=max_connections,
            connect_timeout_s=CONNECT_TIMEOUT_S,
            read_timeout_s=READ_TIMEOUT_S,
            connector=self.connector,
        )


# Builds the rig for a sweep's options; the context closes the backend.
RigFactory = Callable[[SweepOptions], AbstractContextManager[Rig]]
