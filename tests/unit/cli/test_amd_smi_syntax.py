"""The boot unit's ``amd-smi`` command lines, parsed as amd-smi's own ``set`` parser parses them.

Every ExecStart line the unit writes for an AMD card is split as systemd splits it and parsed by
a replica of amd-smi's documented ``set`` syntax (the table below, each flag with its source):
the program by absolute path, ``set``, the card by ``-g UUID``, exactly one set argument per call
(amd-smi's set arguments are one mutually exclusive group), each value in the form and unit that
amd-smi documents. Two versions of the power cap flag are checked: amd-smi of ROCm 6.x takes
``-o WATTS``; the current one takes ``-o WATTS [PWR_TYPE]``; the unit's line must parse under
both. Then what was parsed must be what the card is set to: watts (amd-smi converts them to the
microwatts ``amdsmi_set_power_cap`` takes), MHz, the level MANUAL before the clock limits.
"""

from __future__ import annotations

import argparse
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from powersweep.cli import apply as apply_cli
from powersweep.cli import gpu_backends, main
from powersweep.errors import GpuError
from powersweep.sweep.gpu.amd import AmdsmiBackend
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.settings.boot_unit import BootCommand, BootSetting, render_unit
from tests.fakes.fake_amdsmi import FakeAmdsmi, mi300x, rx7900xtx

MI300X_UUID = "1fff74a1-0000-1000-8000-0000000000a0"
RADEON_UUID = "74ff744c-0000-1000-8000-000000007900"

# Sources of the documented syntax:
#  [6x] ROCm/amdsmi, amdsmi_cli/amdsmi_parser.py (ROCm 6.2/6.3), AMDSMIParser._add_set_value_parser
#       and its validators _positive_int and _limit_select; amdsmi_cli/amdsmi_commands.py
#       set_gpu(), which converts --power-cap from W to uW (convert_SI_unit) before
#       amdsmi_set_power_cap(args.gpu, 0, uW).
#  [7x] ROCm/rocm-systems, projects/amdsmi/amdsmi_cli/amdsmi_parser.py (current amd-smi): the
#       same group, -o with nargs="+", metavar (WATTS, [PWR_TYPE]), validated by
#       _power_cap_options (WATTS digits, PWR_TYPE ppt0 or ppt1), help "Ex: amd-smi set -o
#       1300 ppt0"; -L's _limit_select also takes fclk.
#  [gpu] both: _add_device_arguments: "-g, --gpu" nargs="+", "Select a GPU ID, BDF, or UUID";
#       AMDSMIHelpers.get_device_handles_from_gpu_selections matches a UUID as amdsmi reports it.
#  [lvl] both: -l choices are the names of amdsmi_interface.AmdSmiDevPerfLevel (type str.upper).
# flag -> (long name, nargs, what each value must be, source)
DOCUMENTED: dict[str, tuple[str, str, str, str]] = {
    "-g": ("--gpu", "+", "GPU ID, BDF or UUID", "[gpu]"),
    "-o": (
        "--power-cap",
        "1 [6x], 1-2 [7x]",
        "WATTS: digits, > 0; [7x] then ppt0|ppt1",
        "[6x] [7x]",
    ),
    "-l": ("--perf-level", "1", "an AmdSmiDevPerfLevel name", "[lvl]"),
    "-L": ("--clk-limit", "3", "sclk|mclk (|fclk [7x]), min|max, MHz digits", "[6x] [7x]"),
}
PERF_LEVELS = (
    "AUTO", "LOW", "HIGH", "MANUAL", "STABLE_STD", "STABLE_PEAK", "STABLE_MIN_MCLK",
    "STABLE_MIN_SCLK", "DETERMINISM", "UNKNOWN",
)  # fmt: skip


class _Refused(Exception):
    """amd-smi would refuse the line (argparse error or its own validators)."""


class _SetParser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # type: ignore[override]
        raise _Refused(message)


def _set_parser(version: str) -> _SetParser:
    """amd-smi's ``set`` arguments the unit may use, as documented (see DOCUMENTED)."""
    p = _SetParser(prog="amd-smi set", add_help=False)
    p.add_argument("-g", "--gpu", nargs="+")
    # "set value should only take one of these at a time so args below will be mutually
    # exclusive" (the parser's own comment); no set argument at all is refused by set_gpu()
    one = p.add_mutually_exclusive_group(required=True)
    one.add_argument("-o", "--power-cap", nargs=None if version == "6x" else "+")
    one.add_argument("-l", "--perf-level", type=str.upper, choices=PERF_LEVELS)
    one.add_argument("-L", "--clk-limit", nargs=3)
    return p


@dataclass(frozen=True)
class SetCall:
    """One ``amd-smi set`` call: the card, and its one setting."""

    gpu: list[str]
    power_cap_w: int | None = None
    perf_level: str | None = None
    clk_limit: tuple[str, str, int] | None = None


def _parse(argv: Sequence[str], version: str) -> SetCall:
    """An ``amd-smi set ...`` call as amd-smi parses and validates it (one version)."""
    args = _set_parser(version).parse_args(list(argv))
    cap = None
    if args.power_cap is not None:
        values = [args.power_cap] if version == "6x" else list(args.power_cap)
        if not 1 <= len(values) <= 2:
            raise _Refused(f"--power-cap takes WATTS [PWR_TYPE], got {values}")
        if len(values) == 2 and values[1] not in ("ppt0", "ppt1"):
            raise _Refused(f"--power-cap type {values[1]!r}")
        # _positive_int (6x) / isdigit (7x): whole watts, no sign, no decimals
        if not values[0].isdigit() or int(values[0]) <= 0:
            raise _Refused(f"--power-cap {values[0]!r} is not a positive whole number of watts")
        cap = int(values[0])
    clk = None
    if args.clk_limit is not None:
        clk_type, lim_type, val = args.clk_limit
        clk_types = ("sclk", "mclk") if version == "6x" else ("sclk", "mclk", "fclk")
        if clk_type not in clk_types or lim_type not in ("min", "max") or not val.isdigit():
            raise _Refused(f"--clk-limit {args.clk_limit}")
        clk = (clk_type, lim_type, int(val))
    return SetCall(args.gpu or [], cap, args.perf_level, clk)


def _amd_smi_calls(unit: str, tool: str) -> list[SetCall]:
    """The unit's amd-smi lines, each split as systemd does and parsed under both versions
    (which must agree)."""
    calls = []
    for line in unit.splitlines():
        if not line.startswith("ExecStart="):
            continue
        command = line.removeprefix("ExecStart=")
        assert command.startswith("-"), line  # one card's failure must not stop the others
        argv = shlex.split(command[1:])
        assert argv[0] == tool and Path(argv[0]).is_absolute(), line  # sudo's PATH lacks ROCm
        assert argv[1] == "set", line
        parsed = {v: _parse(argv[2:], v) for v in ("6x", "7x")}
        assert parsed["6x"] == parsed["7x"], line
        calls.append(parsed["6x"])
    return calls


def _check_card(
    calls: Sequence[SetCall],
    uuid: str,
    cap_w: float | None,
    locks: dict[str, float],
    floors: dict[str, float] | None = None,
) -> None:
    """The card's calls set exactly its cap (whole W) and locks (MHz; MANUAL first, then each
    clock's top before its bottom: ``floors``, an SM lock's range bottom, else the top), each
    call naming the card alone."""
    mine = [c for c in calls if c.gpu == [uuid]]
    assert all(c.gpu == [uuid] for c in calls if uuid in c.gpu)  # never two cards in one call
    caps = [c.power_cap_w for c in mine if c.power_cap_w is not None]
    assert caps == ([round(cap_w)] if cap_w is not None else [])
    levels = [i for i, c in enumerate(mine) if c.perf_level is not None]
    limits = [(i, c.clk_limit) for i, c in enumerate(mine) if c.clk_limit is not None]
    if not locks:
        assert levels == [] and limits == []
        return
    assert [mine[i].perf_level for i in levels] == ["MANUAL"]
    assert all(i > levels[0] for i, _ in limits)  # the limits hold only under MANUAL
    bottoms = {**locks, **(floors or {})}
    want = [
        (clk, lim, round(mhz if lim == "max" else bottoms[clk]))
        for clk, mhz in locks.items()
        for lim in ("max", "min")
    ]
    assert [lim for _, lim in limits] == want


def test_the_documented_syntax_table_refuses_what_amd_smi_refuses() -> None:
    """The replica is strict where amd-smi is: a check that passes everything proves nothing."""
    ok = ["-g", "U", "-o", "290"]
    assert _parse(ok, "6x").power_cap_w == 290 and _parse(ok, "7x").power_cap_w == 290
    assert _parse(["-g", "U", "-o", "1300", "ppt0"], "7x").power_cap_w == 1300
    refused = [
        (["-g", "U", "-o", "290.5"], "6x"),  # decimals
        (["-g", "U", "-o", "1300", "ppt0"], "6x"),  # no type before ROCm 7
        (["-g", "U", "-o", "ppt0", "1300"], "7x"),  # watts first
        (["-g", "U", "--power-limit=290"], "7x"),  # nvidia-smi's flag
        (["-g", "U", "-o", "290", "-l", "MANUAL"], "7x"),  # two settings in one call
        (["-g", "U", "-l", "manuel"], "7x"),
        (["-g", "U", "-L", "gfx", "max", "1500"], "7x"),
        (["-g", "U", "-L", "sclk", "max", "1500.0"], "7x"),
        (["-g", "U", "-L", "sclk", "1500"], "7x"),
        (["-g", "U", "-lgc", "1500,1500"], "7x"),
        (["-g", "U"], "7x"),  # no setting
    ]
    for argv, version in refused:
        with pytest.raises(_Refused):
            _parse(argv, version)
    assert set(DOCUMENTED) == {"-g", "-o", "-l", "-L"}  # every flag the unit writes


def _amd(uuid: str, cap_w: float | None, sm: float | None, mem: float | None) -> BootSetting:
    return BootSetting(uuid, "AMD card", cap_w, sm, mem, "run", "amd")


@pytest.mark.parametrize(
    "setting",
    [
        # fractions as a run's analysis may give them: whole watts and MHz on the command line
        _amd(RADEON_UUID, 354.6, 1999.6, 772.4),
        _amd(MI300X_UUID, 500.0, None, None),
        _amd(MI300X_UUID, None, 1300.0, None),
        _amd(RADEON_UUID, None, None, 456.0),
    ],
    ids=["cap-sm-mem", "cap", "sm", "mem"],
)
def test_each_amd_smi_line_of_the_unit_parses_as_documented(setting: BootSetting) -> None:
    tool = "/opt/rocm/bin/amd-smi"
    unit = render_unit([setting], BootCommand("amd-smi", (tool,)), "run")
    calls = _amd_smi_calls(unit, tool)
    locks = {
        clk: mhz
        for clk, mhz in (("sclk", setting.sm_clock_mhz), ("mclk", setting.mem_clock_mhz))
        if mhz is not None
    }
    _check_card(calls, setting.uuid, setting.power_limit_w, locks)
    assert len(calls) == (setting.power_limit_w is not None) + (len(locks) > 0) + 2 * len(locks)


# --- the unit `apply --persist` installs on a machine with an MI300X and a Radeon -------------


@pytest.fixture
def amd_machine(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[FakeAmdsmi, str]:
    """An MI300X and an RX 7900 XTX behind the fake amdsmi, no NVIDIA driver, and ROCm's
    amd-smi in /opt/rocm/bin's place (off PATH, as under sudo)."""
    fake = FakeAmdsmi([mi300x(uuid=MI300X_UUID), rx7900xtx(uuid=RADEON_UUID)])

    def no_nvml() -> NvmlBackend:
        raise GpuError("NVML not available: is the NVIDIA driver installed? (test)")

    monkeypatch.setattr("powersweep.sweep.gpu.nvml.NvmlBackend", no_nvml)
    monkeypatch.setattr(
        gpu_backends, "AmdsmiBackend", lambda **kw: AmdsmiBackend(amdsmi=fake, **kw)
    )
    monkeypatch.setattr(apply_cli, "is_root", lambda: True)
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    rocm = tmp_path / "opt-rocm-bin"
    rocm.mkdir()
    tool = rocm / "amd-smi"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    from powersweep.cli import _boot

    monkeypatch.setitem(_boot._VENDOR_TOOLS, "amd", ("amd-smi", str(rocm)))
    return fake, str(tool)


def test_the_installed_unit_sets_each_amd_card_with_documented_amd_smi_calls(
    amd_machine: tuple[FakeAmdsmi, str],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    fake, tool = amd_machine
    units = tmp_path / "units"
    units.mkdir()
    for args in (
        ["--cap", "500", "--sm-clock", "1500", "--gpus", MI300X_UUID],
        ["--cap", "340", "--sm-clock", "2000", "--mem-clock", "772", "--gpus", RADEON_UUID],
    ):
        code = main(["apply", *args, "--persist", "--unit-dir", str(units)])
        _, err = capsys.readouterr()
        assert code == 0, err
    # the cards hold the settings now (amdsmi takes microwatts: 500 W is 500,000,000 uW)
    assert fake.cards[0].cap_uw == 500_000_000 and fake.cards[1].cap_uw == 340_000_000
    unit = (units / "powersweep-apply.service").read_text()
    calls = _amd_smi_calls(unit, tool)
    # an SM lock is a range from the card's idle floor (issue 45), the memory lock one clock
    _check_card(calls, MI300X_UUID, 500.0, {"sclk": 1500.0}, {"sclk": 500.0})
    _check_card(calls, RADEON_UUID, 340.0, {"sclk": 2000.0, "mclk": 772.0}, {"sclk": 500.0})
    assert len(calls) == 4 + 6
    # a watt figure in range for each card: not milli- or microwatts
    for c, card in ((MI300X_UUID, fake.cards[0]), (RADEON_UUID, fake.cards[1])):
        (w,) = [x.power_cap_w for x in calls if x.gpu == [c] and x.power_cap_w is not None]
        assert card.min_cap_uw / 1e6 <= w <= card.max_cap_uw / 1e6
