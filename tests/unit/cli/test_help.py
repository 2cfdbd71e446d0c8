"""Every command's ``--help`` at 80 columns (issue 47): nothing cut, nothing wider, every flag
there, short lines, no text eaten as markup; and docs/options.md up to date with the option
declarations it is generated from."""

from __future__ import annotations

from typing import Annotated

import pytest
import typer
from rich.cells import cell_len
from typer.testing import CliRunner

from powersweep.cli import app, main
from powersweep.cli.help_layout import (
    HelpCommand,
    Param,
    command_rows,
    label,
    option,
    option_rows,
    visible_params,
    walk,
)
from powersweep.cli.options_doc import options_markdown
from tests.paths import REPO

WIDTH = 80
# One short line, two at most, for each option's help (its default included)
MAX_HELP_LINES = 2
COMMANDS = [path for path, _ in walk(typer.main.get_command(app))]


def _command(path: tuple[str, ...]) -> typer.core.TyperCommand | typer.core.TyperGroup:
    return dict(walk(typer.main.get_command(app)))[path]


def _help(path: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> str:
    assert main([*path, "--help"]) == 0
    return capsys.readouterr().out


def _flags(param: Param) -> list[str]:
    return [*param.opts, *getattr(param, "secondary_opts", [])]


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "root")
def test_help_fits_80_columns_with_every_flag(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = _help(path, capsys)
    assert "…" not in out  # a flag or a word cut short (was `--max-concurrency-pro…`)
    too_wide = [line for line in out.splitlines() if cell_len(line) > WIDTH]
    assert not too_wide, too_wide
    command = _command(path)
    ctx = typer.Context(command)
    for param in visible_params(command, ctx):
        for flag in _flags(param) if isinstance(param, typer.core.TyperOption) else []:
            assert flag in out, flag
        assert (param.help or "").strip(), f"{_flags(param)} has no help line"
    hidden = [f for p in command.get_params(ctx) if p.hidden for f in _flags(p)]
    assert not [f for f in hidden if f"{f} " in out or f"{f}\n" in out], hidden


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p) or "root")
def test_each_help_line_is_short(path: tuple[str, ...]) -> None:
    command = _command(path)
    ctx = typer.Context(command)
    for panel, rows in option_rows(command, ctx, WIDTH):
        for flag, lines in rows:
            # a flag wider than the flag column takes a line of its own above its help
            alone = lines[0].plain.strip() == flag
            help_lines = len(lines) - 1 if alone else len(lines)
            assert 1 <= help_lines <= MAX_HELP_LINES, (panel, [ln.plain for ln in lines])
    if isinstance(command, typer.core.TyperGroup):
        for lines in command_rows(command, ctx, WIDTH):
            assert len(lines) == 1, [ln.plain for ln in lines]  # one line per command


def test_sweep_help_has_panels_by_concern_and_examples(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = _help(("sweep",), capsys)
    for panel in (
        "Load",
        "Measurement",
        "Points",
        "Undervolt (--axis undervolt)",
        "Card",
        "Server",
        "Safety",
        "Output",
        "Simulation",
    ):
        assert f"╭─ {panel} ─" in out, panel
    examples = out[out.index("\nExamples:") :]
    for example in (
        "powersweep --simulate rtx3090-air",  # the demo
        "sudo powersweep --cooling air --load-mode decode-single",  # a real card
        "--axis sm-clock",  # a clock sweep
        "--axis undervolt",  # an undervolt search
        "--resume ",
    ):
        assert example in examples, example
    # at most half of what it was (249 lines at 80 columns before issue 47)
    assert len(out.splitlines()) < 160


@pytest.mark.parametrize("path", [("sweep",), ("apply",), ("status",), ("fleet", "apply")])
def test_help_shows_brackets_as_written(
    path: tuple[str, ...], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rich markup took `[amd]` for a tag and printed `pip install 'powersweep'`
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    out = _help(path, capsys)
    assert "'powersweep[amd]'" in out
    assert "\\[" not in out


def test_text_is_never_read_as_markup(capsys: pytest.CaptureFixture[str]) -> None:
    probe = typer.Typer()

    @probe.command(cls=HelpCommand, epilog="Examples:\n  tool [bold]x[/bold]")
    def _cmd(
        flag: Annotated[str, option(help="Takes [red]colour[/red] and \\[escaped].")] = "x",
    ) -> None:
        """Does [b]nothing[/b]."""

    runner_out = CliRunner().invoke(probe, ["--help"], env={"COLUMNS": "80"})
    for text in ("[red]colour[/red]", "\\[escaped]", "[b]nothing[/b]", "[bold]x[/bold]"):
        assert text in runner_out.output, text


def test_options_doc_is_up_to_date() -> None:
    # regenerate with: python scripts/gen_options_doc.py
    current = (REPO / "docs" / "options.md").read_text(encoding="utf-8")
    assert current == options_markdown(), "docs/options.md is out of date: run " + (
        "python scripts/gen_options_doc.py"
    )


def test_options_doc_holds_each_flag_with_its_default_and_full_explanation() -> None:
    probe = typer.Typer()

    @probe.command("probe", cls=HelpCommand)
    def _cmd(
        window: Annotated[
            float,
            option(
                metavar="S",
                help="Short line.",
                doc="The full explanation, which --help leaves out.",
                panel="Measurement",
            ),
        ] = 2.5,
        plain: Annotated[bool, option("--plain", help="Only a short line.")] = False,
    ) -> None:
        """Probe."""

    @probe.command("other", cls=HelpCommand)
    def _other() -> None:
        """Another, so the app is a group."""

    doc = options_markdown(probe)
    assert "## powersweep probe" in doc and "### Measurement" in doc
    assert "- `--window S` (default `2.5`)" in doc
    assert "The full explanation, which --help leaves out." in doc
    assert "- `--plain`" in doc and "Only a short line." in doc


def test_options_doc_names_every_flag_help_shows() -> None:
    # so a flag added to the declarations changes the document and the up-to-date test fails
    doc = options_markdown()
    for path in COMMANDS:
        command = _command(path)
        if isinstance(command, typer.core.TyperGroup):
            continue
        ctx = typer.Context(command)
        help_option = command.get_help_option(ctx)
        for param in visible_params(command, ctx):
            if param is not help_option:
                assert f"- `{label(param, ctx)}`" in doc, (path, param.name)


def test_sweep_options_keep_their_long_explanations() -> None:
    doc = options_markdown()
    sweep = doc[doc.index("## powersweep sweep") : doc.index("## powersweep restore")]
    # explanations the short help lines left out live on in docs/options.md
    for text in (
        "a request may run on for a margin of at most 10% of a window",
        "a neighbour 10 W away near the sweet spot is told apart",
        "twice what Afterburner shows on GDDR6X/GDDR7",
        "context-slowdown[=PCT_PER_1K_TOKENS] (0.6)",
        "pip install 'powersweep[amd]'",
    ):
        assert text in " ".join(sweep.split()), text
