"""Which GPUs of this machine a setting goes to.

A run's GPUs are found by UUID (NVML indices can change between boots).

The reasoning: docs/apply.md, "powersweep.sweep.settings.targets".
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from powersweep.errors import PowersweepError, UsageError
from powersweep.sweep.gpu import Gpu, GpuBackend, GpuIdentity
from powersweep.sweep.settings.recommendation import MeasuredGpu

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Target:
    """A GPU of this machine that a setting goes to.

    Attributes:
        gpu: The GPU.
        identity: Who it is.
        measured: The run's GPU it stands for (None for a value the user named).
        matched_by: ``uuid``, ``name and index``, ``forced`` (a different card, ``--force``)
            or ``named`` (the user's ``--gpus``/all GPUs, no run).
    """

    gpu: Gpu
    identity: GpuIdentity
    measured: MeasuredGpu | None
    matched_by: str

    @property
    def label(self) -> str:
        """``GPU 0 (NVIDIA GeForce RTX 3090, GPU-...)``."""
        return describe(self.identity)


def describe(ident: GpuIdentity) -> str:
    """``GPU 0 (name, uuid)``: how messages name a card."""
    return f"GPU {ident.index} ({ident.name}, {ident.uuid})"


# amdsmi's UUID of an AMD card (no ``GPU-`` prefix)
_AMD_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
)


def parse_gpu_selection(text: str) -> tuple[str, ...]:
    """Parse ``--gpus``: comma-separated indices and/or UUIDs (NVIDIA's ``GPU-...``, or an AMD
    card's ``1fff74a1-0000-1000-...`` as amdsmi reports it).

    Raises:
        UsageError: An empty list or an entry that is neither.
    """
    items = tuple(t.strip() for t in text.split(",") if t.strip())
    bad = [
        t
        for t in items
        if not (t.isdigit() or t.upper().startswith("GPU-") or _AMD_UUID.fullmatch(t))
    ]
    if not items or bad:
        raise UsageError(
            f"--gpus takes GPU indices and/or UUIDs separated by commas (e.g. 0,1), not {text!r}"
        )
    return items


def machine_gpus(backend: GpuBackend, warn: Warn) -> list[tuple[Gpu, GpuIdentity]]:
    """Every GPU of the backend that can be identified (the others are skipped with a warning).

    Raises:
        PowersweepError: The backend cannot count its GPUs.
    """
    found = []
    for i in range(backend.device_count()):
        try:
            gpu = backend.gpu(i)
            found.append((gpu, gpu.identity()))
        except PowersweepError as exc:
            warn(f"skipping GPU {i}: {exc}")
    return found


def select_gpus(backend: GpuBackend, selection: Sequence[str] | None, warn: Warn) -> list[Target]:
    """The GPUs the user names (all of them when ``selection`` is None).

    Raises:
        UsageError: A named GPU is not on this machine, or there is no GPU at all.
    """
    gpus = machine_gpus(backend, warn)
    if not gpus:
        raise UsageError("no GPU found")
    if selection is None:
        if len(gpus) > 1:
            warn(f"no --gpus given: setting all {len(gpus)} GPUs")
        return [Target(g, ident, None, "named") for g, ident in gpus]
    return [Target(g, ident, None, "named") for g, ident in _pick(gpus, selection)]


def match_run_gpus(
    backend: GpuBackend,
    measured: Sequence[MeasuredGpu],
    *,
    selection: Sequence[str] | None = None,
    force: bool = False,
    warn: Warn,
) -> list[Target]:
    """The GPUs of this machine that a run's setting goes to.

    Args:
        backend: This machine's GPUs.
        measured: The GPUs the run measured.
        selection: ``--gpus``: apply to these cards instead (each must be one the run measured,
            unless ``force``).
        force: Accept a card other than the one measured (with a warning).
        warn: Where warnings go.

    Raises:
        UsageError: A measured GPU is missing, or a card differs from the one measured and
            ``force`` is off.
    """
    gpus = machine_gpus(backend, warn)
    if not gpus:
        raise UsageError("no GPU found")
    by_uuid = {ident.uuid: (g, ident) for g, ident in gpus}
    measured_by_uuid = {m.uuid: m for m in measured if m.uuid}
    targets: list[Target] = []
    if selection is not None:
        for g, ident in _pick(gpus, selection):
            m = measured_by_uuid.get(ident.uuid)
            if m is not None:
                targets.append(Target(g, ident, m, "uuid"))
                continue
            stand_in = next((x for x in measured if x.name == ident.name), measured[0])
            targets.append(_different(g, ident, stand_in, force, warn))
        return targets
    seen: set[str] = set()
    for m in measured:
        hit = by_uuid.get(m.uuid) if m.uuid else None
        if hit is not None:
            g, ident = hit
            if ident.index != m.index:
                warn(f"the run's GPU {m.index} ({m.uuid}) is GPU {ident.index} now")
            target = Target(g, ident, m, "uuid")
        else:
            at_index = next(((g, i) for g, i in gpus if i.index == m.index), None)
            if at_index is None:
                raise UsageError(
                    f"the run measured GPU {m.index} ({m.name}, {m.uuid or 'no UUID recorded'}), "
                    f"which is not on this machine ({_seen(gpus)})"
                )
            g, ident = at_index
            if m.uuid is None and ident.name == m.name:
                warn(
                    f"the run recorded no UUID for GPU {m.index}: matched {describe(ident)} by "
                    "name and index"
                )
                target = Target(g, ident, m, "name and index")
            else:
                target = _different(g, ident, m, force, warn)
        if target.identity.uuid not in seen:
            seen.add(target.identity.uuid)
            targets.append(target)
    return targets


def _different(gpu: Gpu, ident: GpuIdentity, m: MeasuredGpu, force: bool, warn: Warn) -> Target:
    """A card that is not the one measured: refused, or accepted with a warning when forced."""
    other = "another model" if ident.name != m.name else "the same model but another card"
    what = (
        f"{describe(ident)} is not the card the run measured "
        f"({m.name}, {m.uuid or 'no UUID recorded'}): {other}"
    )
    if not force:
        raise UsageError(f"{what}; pass --force to apply the run's setting to it anyway")
    warn(f"{what}; applying anyway (--force)")
    return Target(gpu, ident, m, "forced")


def _pick(
    gpus: Sequence[tuple[Gpu, GpuIdentity]], selection: Sequence[str]
) -> list[tuple[Gpu, GpuIdentity]]:
    picked: list[tuple[Gpu, GpuIdentity]] = []
    for item in selection:
        if item.isdigit():
            hit = next(((g, i) for g, i in gpus if i.index == int(item)), None)
        else:
            hit = next(((g, i) for g, i in gpus if i.uuid.lower() == item.lower()), None)
        if hit is None:
            raise UsageError(f"there is no GPU {item} ({_seen(gpus)})")
        if all(hit[1].uuid != p[1].uuid for p in picked):
            picked.append(hit)
    return picked


def _seen(gpus: Sequence[tuple[Gpu, GpuIdentity]]) -> str:
    if not gpus:
        return "no GPU found"
    return "GPUs here: " + ", ".join(f"{i.index} {i.name} {i.uuid}" for _, i in gpus)
