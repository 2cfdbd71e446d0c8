"""The GPU backends the composition root builds its rigs on: the real cards' library (NVML,
amdsmi, or both in one machine) and a simulated rig's cards behind their vendor's backend.

Kept apart from :mod:`powersweep.cli.rigs`, which builds the sweep's rig (real, simulated or
replayed) and the rigs of ``status``, ``apply`` and ``restore`` from these backends, so each
module holds one concern.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from powersweep.clock import Clock
from powersweep.errors import GpuError, UsageError
from powersweep.sim.amd_cards import SimAmdsmi
from powersweep.sim.sim_gpu import SimGpu
from powersweep.sim.sim_rig import SimRig
from powersweep.sweep.gpu import Gpu, GpuBackend
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.combined import CombinedBackend

# Said where no GPU library starts: on a machine without a GPU the simulated rig is what a user
# wants (issue 47: the error named only the drivers).
NO_GPU_HINT = " (no GPU here? add --simulate rtx3090-air to run on the simulated rig)"


def open_backend(kind: str) -> tuple[GpuBackend, str]:
    """The real GPUs' backend for ``--backend``, and the kind the restore journal records.

    ``auto`` opens both libraries and keeps those that see cards: NVML's first (their indices
    are ``nvidia-smi``'s), then amdsmi's; on a machine with neither, one error names both
    causes.

    Raises:
        GpuError: The library asked for (or, for ``auto``, every library) cannot start.
        UsageError: An unknown kind.
    """
    from powersweep.sweep.gpu.nvml import NvmlBackend

    try:
        if kind == "nvml":
            return NvmlBackend(), "nvml"
        if kind == "amdsmi":
            return AmdsmiBackend(), "amdsmi"
    except GpuError as exc:
        raise GpuError(f"{exc}{NO_GPU_HINT}") from exc
    if kind != "auto":
        raise UsageError(f"--backend must be auto, nvml or amdsmi, not {kind!r}")
    reasons = []
    nvml: GpuBackend | None = None
    try:
        nvml = NvmlBackend()
        nvidia_cards = nvml.device_count()
    except GpuError as exc:
        reasons.append(str(exc))
        nvidia_cards = 0
    amd: GpuBackend | None = None
    try:
        amd = AmdsmiBackend(first_index=nvidia_cards)
        amd_cards = amd.device_count()
    except GpuError as exc:
        reasons.append(str(exc))
        amd_cards = 0
    if nvml is not None and amd is not None and nvidia_cards and amd_cards:
        return CombinedBackend([nvml, amd]), "auto"
    if amd is not None and (amd_cards or nvml is None):
        if nvml is not None:
            nvml.close()
        return amd, "amdsmi"
    if nvml is not None:
        if amd is not None:
            amd.close()
        return nvml, "nvml"
    raise GpuError("no GPU library could start: " + "; ".join(reasons) + NO_GPU_HINT)


def check_sim_backend(kind: str, profiles: Sequence[Any]) -> None:
    """``--backend nvml`` or ``amdsmi`` with ``--simulate`` must match the simulated cards.

    Raises:
        UsageError: A simulated card of the other vendor.
    """
    vendor = {"nvml": "nvidia", "amdsmi": "amd"}.get(kind)
    if vendor is None:
        return
    other = [p.name for p in profiles if getattr(p, "vendor", "nvidia") != vendor]
    if other:
        raise UsageError(
            f"--backend {kind} cannot drive the simulated {', '.join(other)}: drop --backend "
            "(auto) or simulate cards of that vendor"
        )


class _FirstCards:
    """The first ``count`` cards of a simulated rig (its NVIDIA-flavoured ones)."""

    def __init__(self, rig: SimRig, count: int) -> None:
        self._rig = rig
        self._count = count

    def device_count(self) -> int:
        return self._count

    def gpu(self, index: int) -> Gpu:
        return self._rig.gpu(index)

    def close(self) -> None:
        """Nothing to release."""


def vendor_backend(rig: SimRig, clock: Clock) -> GpuBackend:
    """A simulated rig's cards behind the backend of their vendor: NVIDIA profiles as they are,
    AMD profiles through the amdsmi backend over :class:`SimAmdsmi` (numbered after NVIDIA's,
    as on a real machine with both).

    Raises:
        UsageError: An AMD profile listed before an NVIDIA one.
    """
    gpus: list[SimGpu] = rig.gpus
    amd = [g for g in gpus if g.profile.vendor == "amd"]
    if not amd:
        return rig
    first = len(gpus) - len(amd)
    if any(g.profile.vendor == "amd" for g in gpus[:first]):
        raise UsageError(
            "--simulate: list the NVIDIA cards before the AMD ones (the backends number "
            "NVIDIA's first), e.g. rtx4090-air+mi300x"
        )
    amd_backend = AmdsmiBackend(SimAmdsmi(amd, clock), first_index=first)
    return amd_backend if first == 0 else CombinedBackend([_FirstCards(rig, first), amd_backend])
