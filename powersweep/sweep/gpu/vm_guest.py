"""Whether this machine looks like a virtual machine guest.

The reasoning: docs/architecture.md, "powersweep.sweep.gpu.vm_guest".
"""

from __future__ import annotations

import re
from pathlib import Path

# DMI names of virtual machines: (what it is, pattern on sys_vendor or None, pattern on
# product_name or None); both given must match. A vendor that also sells real machines
# (Microsoft's Surface, Google's Pixelbook, Oracle's servers) is named with its product.
_DMI_GUESTS: tuple[tuple[str, str | None, str | None], ...] = (
    ("QEMU", r"\bqemu\b", None),
    ("KVM", None, r"\bkvm\b"),
    ("VMware", r"\bvmware\b", None),
    ("VirtualBox", r"\binnotek\b", None),
    ("VirtualBox", None, r"\bvirtualbox\b"),
    ("Xen", r"\bxen\b", None),
    ("Xen", None, r"\bhvm domu\b"),
    ("Hyper-V", r"\bmicrosoft corporation\b", r"\bvirtual machine\b"),
    # EC2's bare-metal instances (m5.metal, m7i.metal-24xl) keep the vendor: only their
    # product tells.
    ("Amazon EC2", r"\bamazon ec2\b", r"^(?!.*\.metal\b)"),
    ("Google Compute Engine", None, r"\bgoogle compute engine\b"),
    ("Parallels", r"\bparallels\b", None),
    ("Bochs", r"\bbochs\b", None),
    ("OpenStack Nova", None, r"\bopenstack nova\b"),
    ("Cloud Hypervisor", r"\bcloud hypervisor\b", None),
)
_DMI_FIELDS = ("sys_vendor", "product_name")


def vm_guest(
    cpuinfo: Path = Path("/proc/cpuinfo"), dmi_dir: Path = Path("/sys/class/dmi/id")
) -> str | None:
    """Why this machine looks like a virtual machine guest, or None if nothing says so.

    Never raises: a file missing or unreadable is no evidence (a bare-metal ARM machine has no
    ``flags`` line and may have no DMI at all).

    Args:
        cpuinfo: The kernel's CPU description; its ``flags`` lines are searched for
            ``hypervisor``.
        dmi_dir: The firmware's DMI identity (``sys_vendor`` and ``product_name`` are read).

    Returns:
        None on bare metal; else a short description of the evidence, e.g. ``the CPU reports
        the hypervisor flag; DMI names QEMU (sys_vendor 'QEMU', product_name 'Standard PC')``.
    """
    reasons = []
    if _hypervisor_flag(_read(cpuinfo)):
        reasons.append("the CPU reports the hypervisor flag")
    dmi = {name: (_read(dmi_dir / name) or "").strip() for name in _DMI_FIELDS}
    what = _dmi_guest(dmi["sys_vendor"], dmi["product_name"])
    if what is not None:
        shown = ", ".join(f"{name} {value!r}" for name, value in dmi.items() if value)
        reasons.append(f"DMI names {what} ({shown})")
    return "; ".join(reasons) if reasons else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):  # ValueError: a path the OS cannot name (an embedded NUL)
        return None


def _hypervisor_flag(text: str | None) -> bool:
    for line in (text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags" and "hypervisor" in value.split():
            return True
    return False


def _dmi_guest(vendor: str, product: str) -> str | None:
    for what, on_vendor, on_product in _DMI_GUESTS:
        if on_vendor is not None and not re.search(on_vendor, vendor, re.IGNORECASE):
            continue
        if on_product is not None and not re.search(on_product, product, re.IGNORECASE):
            continue
        return what
    return None
