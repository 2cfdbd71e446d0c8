"""powersweep.cli.flag_params: a command's flags made from its option groups' fields, and the
groups built back from what the flags took."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from powersweep.cli.flag_params import build, command
from powersweep.cli.help_layout import HelpCommand
from powersweep.cli.sweep import ShowOptions, sweep_command
from powersweep.flags import KEY, flag, flagged, negated, read_from
from powersweep.sim.sim_options import FLAGS, SimOptions
from powersweep.sweep.options import (
    Backend,
    CardOptions,
    PointOptions,
    SweepOptions,
    is_all,
)


def _defaults() -> dict[str, Any]:
    return {
        name: p.default
        for name, p in inspect.signature(sweep_command).parameters.items()
        if p.default is not inspect.Parameter.empty
    }


def test_the_flags_left_at_their_defaults_build_the_default_groups() -> None:
    # what the flags take by default is what each group's own default means
    given = _defaults()
    assert build(SweepOptions, given) == SweepOptions()
    assert build(SimOptions, given) == SimOptions()
    assert build(ShowOptions, given) == ShowOptions()


def test_every_flagged_field_of_the_sweeps_groups_is_one_parameter() -> None:
    params = inspect.signature(sweep_command).parameters
    declared = [
        spec.param
        for group in (SweepOptions, ShowOptions, SimOptions)
        for member in _every_group(group)
        for _, spec in flagged(member)
        if spec.reads is None
    ]
    assert sorted(declared) == sorted(name for name in params if name != "ctx")
    assert len(declared) == len(set(declared))


def _every_group(group: Any) -> list[Any]:
    hints = typing.get_type_hints(group)
    out = [group]
    for f in dataclasses.fields(group):
        hint = hints[f.name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out.extend(_every_group(hint))
    return out


@pytest.mark.parametrize(
    ("text", "gpus", "all_gpus"), [(None, None, False), ("all", None, True), ("0,2", (0, 2), False)]
)
def test_one_flag_feeds_the_fields_that_read_it(
    text: str | None, gpus: tuple[int, ...] | None, all_gpus: bool
) -> None:
    cards = build(CardOptions, {"gpu": text, "backend": Backend.NVML})
    assert cards == CardOptions(gpus=gpus, all_gpus=all_gpus, backend=Backend.NVML)


def test_a_no_switch_turns_its_field_off() -> None:
    given = {**_defaults(), "no_confirm": True}
    assert build(PointOptions, given).confirm is False
    assert build(PointOptions, _defaults()).confirm is True


def test_the_sim_flags_are_the_declared_ones() -> None:
    assert FLAGS["seed"] == "--seed" and FLAGS["pace"] == "--sim-pace"
    assert FLAGS["vf_reset_beyond_mhz"] == "--sim-vf-reset-beyond-mhz"
    assert set(FLAGS) == {f.name for f in dataclasses.fields(SimOptions)}


@dataclasses.dataclass(frozen=True)
class _Probe:
    window_s: float = flag(2.5, "--window", metavar="S", help="Window.", panel="Measurement")
    names: tuple[str, ...] | None = flag(
        None,
        "--names",
        help="Names.",
        takes=str | None,
        parse=lambda t: tuple(t.split(",")) if t is not None else None,
    )
    every: bool = read_from("names", is_all, False)
    check: bool = flag(
        True, "--no-check", help="No check.", takes=bool, given_default=False, parse=negated
    )


def test_a_generated_command_builds_its_group_from_the_command_line() -> None:
    got: list[_Probe] = []

    def body(probe: _Probe) -> None:
        """Probe."""
        got.append(probe)

    app = typer.Typer()
    app.command("probe", cls=HelpCommand)(command(body))

    @app.command("other")
    def _other() -> None:
        """Another, so the app is a group."""

    runner = CliRunner()
    result = runner.invoke(app, ["probe", "--window", "4", "--names", "a,b", "--no-check"])
    assert result.exit_code == 0, result.output
    assert got == [_Probe(window_s=4.0, names=("a", "b"), every=False, check=False)]
    assert runner.invoke(app, ["probe"]).exit_code == 0
    assert got[-1] == _Probe()
    assert runner.invoke(app, ["probe", "--names", "all"]).exit_code == 0
    assert got[-1].every is True
    out = runner.invoke(app, ["probe", "--help"], env={"COLUMNS": "80"}).output
    assert "--window S" in out and "[default: 2.5]" in out and "Probe." in out


@dataclasses.dataclass(frozen=True)
class _Twice:
    a: int = flag(1, "--same", help="A.")
    b: int = flag(2, "--same", help="B.")


def test_two_fields_with_one_flag_are_refused() -> None:
    def body(twice: _Twice) -> None:
        """Twice."""

    with pytest.raises(TypeError, match="two flags make the parameter same"):
        command(body)


def test_a_field_without_a_flag_keeps_its_default() -> None:
    @dataclasses.dataclass(frozen=True)
    class Partly:
        shown: int = flag(1, "--shown", help="Shown.")
        kept: int = 7

    assert build(Partly, {"shown": 3}) == Partly(shown=3, kept=7)
    assert KEY not in dataclasses.fields(Partly)[1].metadata
