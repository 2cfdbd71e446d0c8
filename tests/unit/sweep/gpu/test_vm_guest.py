"""powersweep.sweep.gpu.vm_guest: a virtual machine guest told by the CPU's hypervisor flag and
the DMI vendor and product, from files written under tmp_path; unreadable files are no
evidence."""

from __future__ import annotations

from pathlib import Path

import pytest

from powersweep.sweep.gpu.vm_guest import vm_guest

BARE_FLAGS = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr avx2 sha_ni"


def _cpuinfo(tmp_path: Path, flags: str = BARE_FLAGS, cpus: int = 2) -> Path:
    text = "".join(
        f"processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon\nflags\t\t: {flags}\n"
        "bugs\t\t: spectre_v1\n\n"
        for i in range(cpus)
    )
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    return path


def _dmi(tmp_path: Path, vendor: str | None, product: str | None) -> Path:
    path = tmp_path / "dmi"
    path.mkdir()
    for name, value in (("sys_vendor", vendor), ("product_name", product)):
        if value is not None:
            (path / name).write_text(value + "\n")
    return path


def test_bare_metal_is_none(tmp_path: Path) -> None:
    dmi = _dmi(tmp_path, "Supermicro", "SYS-4029GP-TRT")
    assert vm_guest(_cpuinfo(tmp_path), dmi) is None


def test_the_hypervisor_flag_alone(tmp_path: Path) -> None:
    cpuinfo = _cpuinfo(tmp_path, BARE_FLAGS + " hypervisor lahf_lm")
    dmi = _dmi(tmp_path, "Dell Inc.", "PowerEdge XE9680")
    assert vm_guest(cpuinfo, dmi) == "the CPU reports the hypervisor flag"


def test_the_flag_counts_only_on_a_flags_line_and_as_a_whole_word(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(
        "model name\t: hypervisor edition\nflags\t\t: fpu nohypervisor\nbugs\t\t: hypervisor\n"
    )
    assert vm_guest(path, tmp_path / "no-dmi") is None


@pytest.mark.parametrize(
    ("vendor", "product", "what"),
    [
        ("QEMU", "Standard PC (Q35 + ICH9, 2009)", "QEMU"),
        ("Red Hat", "KVM", "KVM"),
        ("VMware, Inc.", "VMware Virtual Platform", "VMware"),
        ("innotek GmbH", "VirtualBox", "VirtualBox"),
        ("Xen", "HVM domU", "Xen"),
        ("Microsoft Corporation", "Virtual Machine", "Hyper-V"),
        ("Amazon EC2", "p5.48xlarge", "Amazon EC2"),
        ("Google", "Google Compute Engine", "Google Compute Engine"),
        ("OpenStack Foundation", "OpenStack Nova", "OpenStack Nova"),
    ],
)
def test_dmi_alone_names_the_hypervisor(
    tmp_path: Path, vendor: str, product: str, what: str
) -> None:
    reason = vm_guest(_cpuinfo(tmp_path), _dmi(tmp_path, vendor, product))
    assert reason == f"DMI names {what} (sys_vendor {vendor!r}, product_name {product!r})"


@pytest.mark.parametrize(
    ("vendor", "product"),
    [
        ("Microsoft Corporation", "Surface Pro 9"),  # a real Microsoft machine
        ("Google", "Pixelbook"),
        ("Amazon EC2", "p4d.metal"),  # EC2 bare metal keeps the vendor
        ("Amazon EC2", "m7i.metal-24xl"),
        ("Oracle Corporation", "ORACLE SERVER X9-2"),
        ("Xenon Systems", "Workstation"),  # "Xen" only as a word
    ],
)
def test_real_machines_of_cloud_and_hypervisor_vendors_are_bare_metal(
    tmp_path: Path, vendor: str, product: str
) -> None:
    assert vm_guest(_cpuinfo(tmp_path), _dmi(tmp_path, vendor, product)) is None


def test_flag_and_dmi_both_reported(tmp_path: Path) -> None:
    cpuinfo = _cpuinfo(tmp_path, "hypervisor " + BARE_FLAGS)
    reason = vm_guest(cpuinfo, _dmi(tmp_path, "QEMU", None))
    assert reason == "the CPU reports the hypervisor flag; DMI names QEMU (sys_vendor 'QEMU')"


def test_missing_files_are_no_evidence(tmp_path: Path) -> None:
    assert vm_guest(tmp_path / "no-cpuinfo", tmp_path / "no-dmi") is None
    # A directory where a file is expected, and a path no OS can open, are no evidence either.
    assert vm_guest(tmp_path, Path("bad\0path")) is None
    # Undecodable bytes do not stop the flag from being found.
    path = tmp_path / "cpuinfo"
    path.write_bytes(b"model name\t: \xff\xfe\nflags\t\t: fpu hypervisor\n")
    assert vm_guest(path, tmp_path / "no-dmi") == "the CPU reports the hypervisor flag"


def test_unreadable_files_are_no_evidence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A permission error raised for every read (root would read a file of mode 0 anyway).
    cpuinfo = _cpuinfo(tmp_path, "hypervisor")
    dmi = _dmi(tmp_path, "QEMU", "KVM")
    assert vm_guest(cpuinfo, dmi) is not None

    def refuse(self: Path, *args: object, **kwargs: object) -> str:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "read_text", refuse)
    assert vm_guest(cpuinfo, dmi) is None


def test_the_defaults_read_this_machine_without_raising() -> None:
    reason = vm_guest()
    assert reason is None or reason
