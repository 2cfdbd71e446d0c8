"""``--help`` one can scan: every command's help drawn in panels of two columns (the flag with
its value, a short line), an option's full explanation kept beside it for docs/options.md.

Typer's own layout gives each panel a table of six columns that Rich shrinks to fit: at 80
columns flag names were cut (``--max-concurrency-pro…``) and help ran to ten lines.

The reasoning: docs/architecture.md, "powersweep.cli.help_layout".
"""

from __future__ import annotations

import inspect
import os
import textwrap
from collections.abc import Iterable, Sequence
from enum import Enum
from pathlib import PurePath
from typing import Any

import typer
from rich.console import Console, Group
from rich.panel import Panel
from rich.text import Text
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption
from typer.models import ArgumentInfo, OptionInfo

from powersweep.flags import (
    CARD,
    LOAD,
    MEASUREMENT,
    OUTPUT,
    POINTS,
    SAFETY,
    SERVER,
    SIMULATION,
    UNDERVOLT,
)

ARGUMENTS = "Arguments"
OPTIONS = "Options"
# Panels in the order a reader looks for them (sweep's concerns first); a panel not named here
# comes before Simulation, in the order its first option is declared.
PANEL_ORDER = (
    ARGUMENTS,
    OPTIONS,
    "Report group",
    "Recommendation",
    "Settings",
    LOAD,
    MEASUREMENT,
    POINTS,
    UNDERVOLT,
    CARD,
    SERVER,
    SAFETY,
    OUTPUT,
    "Boot persistence",
    SIMULATION,
)
# Where --help goes when every other option has a panel of its own: the first of these there
HELP_PANELS = (OUTPUT, SAFETY)
# The flag column's widest, as a share of the panel: the help column keeps the rest
LABEL_SHARE = 3 / 8
GAP = 2
# A panel's border and padding, in columns
PANEL_FRAME = 4

# typer's command classes (typer 0.29 carries its own click: its classes, not click's)
Command = TyperCommand | TyperGroup
Param = TyperOption | TyperArgument


class DocOptionInfo(OptionInfo):
    """A typer option with its full explanation (``doc``) beside the short line ``--help``
    shows: docs/options.md prints the explanation."""

    def __init__(self, *, doc: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.doc = doc


def option(
    *decls: str, help: str, doc: str | None = None, panel: str | None = None, **kwargs: Any
) -> Any:
    """``typer.Option(*decls, help=help, rich_help_panel=panel, **kwargs)`` that also keeps
    ``doc``, the option's full explanation (for docs/options.md; None: the help says it all)."""
    return DocOptionInfo(
        default=...,  # the value comes from the parameter's default, as typer wants in Annotated
        param_decls=decls,
        help=help,
        doc=doc,
        rich_help_panel=panel,
        **kwargs,
    )


class DocArgumentInfo(ArgumentInfo):
    """A typer argument with its full explanation (``doc``), as :class:`DocOptionInfo`."""

    def __init__(self, *, doc: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.doc = doc


def argument(*, help: str, doc: str | None = None, **kwargs: Any) -> Any:
    """``typer.Argument(help=help, **kwargs)`` that also keeps ``doc``, its full explanation."""
    return DocArgumentInfo(default=..., help=help, doc=doc, **kwargs)


def full_doc(command: Command, param: Param) -> str:
    """A parameter's full explanation: its declared ``doc``, else its help."""
    from typer.utils import get_params_from_function

    callback = command.callback
    if callback is not None and param.name:
        meta = get_params_from_function(inspect.unwrap(callback)).get(param.name)
        doc = getattr(meta.default, "doc", None) if meta is not None else None
        if doc:
            return " ".join(str(doc).split())
    return " ".join(str(param.help or "").split())


def metavar(param: Param, ctx: typer.Context) -> str:
    """What follows the flag: its declared metavar, else typer's ``<type>`` or ``<a|b>``; an
    argument's name."""
    if isinstance(param, TyperArgument):
        if param.metavar:
            return param.metavar
        return (param.name or "").upper() + ("..." if param.nargs != 1 else "")
    if param.is_flag and not param.count:
        return ""
    return param.display_type_rich(ctx) or ""


def label(param: Param, ctx: typer.Context) -> str:
    """The flag (the long forms first, then the short, then the negative) and its value."""
    value = metavar(param, ctx)
    if isinstance(param, TyperArgument):
        return value
    names = sorted(param.opts, key=lambda o: not o.startswith("--")) + param.secondary_opts
    return f"{', '.join(names)} {value}".strip()


def default_text(param: Param) -> str | None:
    """The default as ``--help`` and docs/options.md show it (None: nothing to show)."""
    if not isinstance(param, TyperOption) or param.show_default is False:
        return None
    if isinstance(param.show_default, str):
        return param.show_default
    value = param.default
    if callable(value) or value is None or value == () or value == []:
        return None
    if param.is_flag and not param.secondary_opts:
        return None  # a plain flag is off unless given
    if isinstance(value, bool):
        return (param.opts if value else param.secondary_opts)[0]
    return _value_text(value)


def _value_text(value: Any) -> str:
    if isinstance(value, Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, list | tuple):
        return ",".join(_value_text(v) for v in value)
    return str(value)


def envvar_text(param: Param) -> str | None:
    """The environment variable ``--help`` names (None: none shown)."""
    envvar = param.envvar
    if not envvar or not getattr(param, "show_envvar", False):
        return None
    return envvar if isinstance(envvar, str) else ", ".join(envvar)


def help_lines(param: Param, console: Console, width: int) -> list[Text]:
    """The short help wrapped at ``width``, then the environment variable and the default,
    dim, each kept whole: on the last line where it fits, else on a line of its own."""
    words = " ".join(str(param.help or "").split())
    lines = list(Text(words).wrap(console, width)) if words else []
    extras = []
    if (envvar := envvar_text(param)) is not None:
        extras.append(f"[env: {envvar}]")
    if (default := default_text(param)) is not None:
        extras.append(f"[default: {default}]")
    for extra in extras:
        if lines and lines[-1].cell_len + 1 + len(extra) <= width:
            lines[-1].append(" " + extra, style="dim")
        else:
            lines.append(Text(extra, style="dim"))
    return lines or [Text("")]


def panels(command: Command, ctx: typer.Context) -> list[tuple[str, list[Param]]]:
    """The command's visible parameters by panel, panels in :data:`PANEL_ORDER`."""
    grouped: dict[str, list[Param]] = {}
    help_option = command.get_help_option(ctx)
    for param in command.get_params(ctx):
        if not isinstance(param, TyperOption | TyperArgument):
            continue
        if param.hidden or param is help_option:
            continue
        default = ARGUMENTS if isinstance(param, TyperArgument) else OPTIONS
        grouped.setdefault(param.rich_help_panel or default, []).append(param)
    if help_option is not None:
        where = next((p for p in (OPTIONS, *HELP_PANELS) if p in grouped), OPTIONS)
        grouped.setdefault(where, []).append(help_option)
    late = PANEL_ORDER.index(SIMULATION) - 0.5
    order = {name: PANEL_ORDER.index(name) if name in PANEL_ORDER else late for name in grouped}
    names = sorted(grouped, key=lambda name: order[name])  # stable: declared order among equals
    return [(name, grouped[name]) for name in names]


Rows = list[tuple[str, list[tuple[str, list[Text]]]]]


def option_rows(command: Command, ctx: typer.Context, width: int) -> Rows:
    """Each panel's rows at ``width`` columns: (panel, [(label, the lines it takes)]).

    A row's first line holds the flag and the help's first line; a flag wider than the flag
    column takes a line of its own, the help on the lines after it.
    """
    console = Console(width=width, highlight=False)
    inner = width - PANEL_FRAME
    grouped = panels(command, ctx)
    labels = {id(p): label(p, ctx) for _, params in grouped for p in params}
    bound = max(12, int(inner * LABEL_SHARE))
    label_w = max((len(t) for t in labels.values() if len(t) <= bound), default=bound)
    help_w = inner - label_w - GAP
    out = []
    for name, params in grouped:
        rows = []
        for param in params:
            flag = labels[id(param)]
            body = help_lines(param, console, help_w)
            styled = _styled_label(flag, metavar(param, ctx))
            lines: list[Text] = []
            if len(flag) > label_w:
                lines.append(styled)
                flag_cell = Text(" " * label_w)
            else:
                flag_cell = styled + Text(" " * (label_w - len(flag)))
            for i, line in enumerate(body):
                cell = flag_cell if i == 0 else Text(" " * label_w)
                lines.append(cell + Text(" " * GAP) + line)
            rows.append((flag, lines))
        out.append((name, rows))
    return out


def _styled_label(flag: str, value: str) -> Text:
    names = flag[: len(flag) - len(value)].rstrip() if value else flag
    text = Text(names, style="bold cyan")
    if value:
        text.append(" " if names else "")
        text.append(value, style="yellow")
    return text


def paragraphs(text: str) -> list[str]:
    """A docstring's paragraphs, each on one line (a paragraph starting with \\b keeps its
    line breaks), everything after \\f left out."""
    text = inspect.cleandoc(text).partition("\f")[0]
    out = []
    for para in text.split("\n\n"):
        if para.startswith("\b"):
            out.append(para.strip("\b\n"))
        elif para.strip():
            out.append(" ".join(para.split()))
    return out


def _console() -> Console:
    width = os.environ.get("TERMINAL_WIDTH")
    return Console(width=int(width) if width else None, highlight=False)


def render_help(command: Command, ctx: typer.Context, console: Console) -> None:
    """Print the command's help: usage, description, panels, commands, examples."""
    console.print(Text(usage(command, ctx), style="bold"))
    console.print()
    for i, para in enumerate(paragraphs(command.help or "")):
        console.print(Text(para, style="" if i == 0 else "dim"))
        console.print()
    for name, rows in option_rows(command, ctx, console.width):
        console.print(_panel(name, Group(*(line for _, lines in rows for line in lines))))
    if isinstance(command, TyperGroup):
        rows_ = command_rows(command, ctx, console.width)
        if rows_:
            lines_ = (line for lines in rows_ for line in lines)
            console.print(_panel("Commands", Group(*lines_)))
    if command.epilog:
        console.print()
        _print_epilog(command.epilog, console)


def usage(command: Command, ctx: typer.Context) -> str:
    """``Usage: powersweep CMD [OPTIONS] ARG...``: arguments by their metavar (typer 0.29
    writes ``{paths}...``), an optional one in brackets."""
    words = [f"Usage: {ctx.command_path}"]
    params = command.get_params(ctx)
    if any(isinstance(p, TyperOption) for p in params):
        words.append("[OPTIONS]")
    for param in params:
        if isinstance(param, TyperArgument):
            name = metavar(param, ctx)
            words.append(name if param.required else f"[{name}]")
    if isinstance(command, TyperGroup):
        words.append("COMMAND [ARGS]...")
    return " ".join(words)


def _panel(title: str, body: Any) -> Panel:
    return Panel(body, title=title, title_align="left", border_style="dim", padding=(0, 1))


def command_rows(group: TyperGroup, ctx: typer.Context, width: int) -> list[list[Text]]:
    """The group's commands, each as the lines it takes at ``width`` columns."""
    console = Console(width=width, highlight=False)
    commands = [
        (name, cmd)
        for name in group.list_commands(ctx)
        if (cmd := group.get_command(ctx, name)) is not None and not cmd.hidden
    ]
    name_w = max((len(name) for name, _ in commands), default=0)
    help_w = width - PANEL_FRAME - name_w - GAP
    rows = []
    for name, cmd in commands:
        short = cmd.short_help or next(iter(paragraphs(cmd.help or "")), "")
        body = list(Text(short).wrap(console, help_w)) or [Text("")]
        lines = []
        for i, line in enumerate(body):
            cell = Text(name.ljust(name_w), style="bold cyan") if i == 0 else Text(" " * name_w)
            lines.append(cell + Text(" " * GAP) + line)
        rows.append(lines)
    return rows


def _print_epilog(epilog: str, console: Console) -> None:
    """The examples, line by line as written; a ``#`` comment dim."""
    for line in textwrap.dedent(epilog).strip("\n").splitlines():
        code, hash_, comment = line.partition("#")
        text = Text(code, style="bold" if line.endswith(":") and not hash_ else "")
        if hash_:
            text.append(hash_ + comment, style="dim")
        console.print(text)


class HelpCommand(TyperCommand):
    """A typer command whose ``--help`` is drawn by :func:`render_help`."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        render_help(self, ctx, _console())


class HelpGroup(TyperGroup):
    """A typer group whose ``--help`` is drawn by :func:`render_help`."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        render_help(self, ctx, _console())


def visible_params(command: Command, ctx: typer.Context) -> Iterable[Param]:
    """The parameters ``--help`` lists, panel by panel."""
    return (p for _, params in panels(command, ctx) for p in params)


def walk(command: Command, path: Sequence[str] = ()) -> Iterable[tuple[tuple[str, ...], Command]]:
    """Every command under ``command`` (itself first), with its words after ``powersweep``."""
    yield tuple(path), command
    if isinstance(command, TyperGroup):
        ctx = typer.Context(command)
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if isinstance(sub, TyperCommand | TyperGroup) and not sub.hidden:
                yield from walk(sub, (*path, name))
