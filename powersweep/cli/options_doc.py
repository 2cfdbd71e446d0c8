"""docs/options.md from the option declarations: every command's options by help panel, each
with its value, default and full explanation (``--help`` shows the short line).

``scripts/gen_options_doc.py`` writes the file; a test fails when it is out of date.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from powersweep.cli.help_layout import (
    Command,
    default_text,
    envvar_text,
    full_doc,
    label,
    panels,
    paragraphs,
    walk,
)

HEADER = """\
# Command-line options

Every option of every command, by the panel `--help` shows it in, with its default and its full
explanation (`powersweep COMMAND --help` shows one short line each). Generated from the option
declarations by `scripts/gen_options_doc.py`: edit the declarations (`powersweep/cli/`), not
this file; a test fails when it is out of date.
"""

# Characters Markdown would read as markup in running text (a tag, strikethrough, emphasis)
_MARKUP = re.compile(r"([<>~*\\])")


def _text(text: str) -> str:
    return _MARKUP.sub(r"\\\1", text)


def options_markdown(app: typer.Typer | None = None) -> str:
    """The whole of docs/options.md for ``app`` (default: powersweep's)."""
    if app is None:
        from powersweep.cli import app as powersweep_app

        app = powersweep_app
    root = typer.main.get_command(app)
    assert isinstance(root, TyperCommand | TyperGroup)
    out = [HEADER]
    commands = [(path, cmd) for path, cmd in walk(root) if path and not _is_group(cmd)]
    out.append("Commands: " + ", ".join(f"[`{' '.join(p)}`](#{_anchor(p)})" for p, _ in commands))
    out.append("")
    for path, command in commands:
        out.extend(_command_section(path, command))
    return "\n".join(out).rstrip("\n") + "\n"


def _is_group(command: Command) -> bool:
    return isinstance(command, TyperGroup)


def _anchor(path: tuple[str, ...]) -> str:
    return "powersweep-" + "-".join(path)


def _command_section(path: tuple[str, ...], command: Command) -> list[str]:
    ctx = typer.Context(command, info_name=" ".join(("powersweep", *path)))
    lines = [f"## powersweep {' '.join(path)}", ""]
    for para in paragraphs(command.help or ""):
        lines += [_wrap(_text(para)), ""]
    help_option = command.get_help_option(ctx)
    for panel, params in panels(command, ctx):
        shown = [p for p in params if p is not help_option]
        if not shown:
            continue
        lines += [f"### {panel}", ""]
        for param in shown:
            lines += _param_entry(command, param, ctx)
    if command.epilog:
        title, _, body = textwrap.dedent(command.epilog).strip("\n").partition("\n")
        lines += [f"{title}", "", "```sh", textwrap.dedent(body), "```", ""]
    return lines


def _param_entry(command: Command, param: Any, ctx: typer.Context) -> list[str]:
    facts = []
    if (default := default_text(param)) is not None:
        facts.append(f"default `{default}`")
    if (envvar := envvar_text(param)) is not None:
        facts.append(f"environment `{envvar}`")
    head = f"- `{label(param, ctx)}`" + (f" ({', '.join(facts)})" if facts else "")
    doc = full_doc(command, param)
    return [head, "", textwrap.indent(_wrap(_text(doc), 98), "  "), ""]


def _wrap(text: str, width: int = 100) -> str:
    return "\n".join(textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False))
