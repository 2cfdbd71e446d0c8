"""The ``powersweep`` command line: one module per command, and the composition root.

``powersweep [OPTIONS]`` is ``powersweep sweep [OPTIONS]`` (that is how users type it:
``sudo powersweep --cooling air --load-mode decode-single``).

The reasoning: docs/architecture.md, "powersweep.cli".
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from powersweep import __version__
from powersweep.errors import PowersweepError


def _is_the_command() -> bool:
    """True in the real command, not when a test or a program imports this module."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return program in ("powersweep", "__main__.py")


def _quiet_ctrl_c_while_loading() -> None:
    # A Ctrl-C while the command is still importing has nothing to clean up (no limit was
    # touched): end quietly instead of printing an import traceback. main() puts Python's
    # handler back.
    if threading.current_thread() is threading.main_thread() and _is_the_command():
        signal.signal(signal.SIGINT, signal.SIG_DFL)


def _one_blas_thread() -> None:
    # Before numpy loads: the analysis' matrices are small, and OpenBLAS starts a thread per
    # core that spins after each call, CPU taken from the server the sweep measures (2% of a
    # real 256-stream sweep's CPU on 2 cores; on a 64-core host, 63 spinning threads). A
    # user's own setting is kept.
    if _is_the_command():
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


_quiet_ctrl_c_while_loading()
_one_blas_thread()

import typer  # noqa: E402
from typer.core import TyperGroup, TyperOption  # noqa: E402

from powersweep.cli import analyze, apply, compare, import_table, plot, restore, status  # noqa: E402
from powersweep.cli._common import one_line  # noqa: E402
from powersweep.cli.fleet import fleet_app  # noqa: E402
from powersweep.cli.help_layout import HelpCommand, HelpGroup  # noqa: E402
from powersweep.cli.sweep import SWEEP_EXAMPLES, sweep_command  # noqa: E402

COMMANDS = ("sweep", "restore", "analyze", "plot", "compare", "import", "status", "apply", "fleet")
# Options of ``powersweep`` itself; anything else before a command is the sweep's.
ROOT_OPTIONS = ("--help", "-h", "--version", "--install-completion", "--show-completion")

app = typer.Typer(
    cls=HelpGroup,
    add_completion=True,
    rich_markup_mode="rich",
    pretty_exceptions_enable=False,
    no_args_is_help=False,
    help=(
        "Find the GPU power cap with the best LLM tokens per watt.\n\n"
        "`powersweep [OPTIONS]` runs `powersweep sweep [OPTIONS]`; "
        "`powersweep COMMAND --help` lists a command's options."
    ),
    epilog="""Examples:
  # the demo: a simulated RTX 3090, no GPU or root needed (seconds)
  powersweep --simulate rtx3090-air --cooling air --load-mode decode-single
  # a real card, against the local server (power limits need root)
  sudo powersweep --cooling air --load-mode decode-single
  # then set the sweet spot it found
  sudo powersweep apply powersweep-runs/RUN""",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"powersweep {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Find the GPU power cap with the best LLM tokens per watt."""


app.command("sweep", cls=HelpCommand, epilog=SWEEP_EXAMPLES)(sweep_command)
app.command("restore", cls=HelpCommand, epilog=restore.EXAMPLES)(restore.restore_command)
app.command("analyze", cls=HelpCommand, epilog=analyze.EXAMPLES)(analyze.analyze_command)
app.command("plot", cls=HelpCommand, epilog=plot.EXAMPLES)(plot.plot_command)
app.command("compare", cls=HelpCommand, epilog=compare.EXAMPLES)(compare.compare_command)
app.command("import", cls=HelpCommand, epilog=import_table.EXAMPLES)(import_table.import_command)
app.command("status", cls=HelpCommand, epilog=status.EXAMPLES)(status.status_command)
app.command("apply", cls=HelpCommand, epilog=apply.EXAMPLES)(apply.apply_command)
app.add_typer(fleet_app, name="fleet")


def _argv_with_default_command(argv: Sequence[str]) -> list[str]:
    args = list(argv)
    if not args or args[0] in (
        "--help",
        "-h",
        "--version",
        "--install-completion",
        "--show-completion",
    ):
        return args if args else ["sweep"]
    if args[0] not in COMMANDS:
        return ["sweep", *args]
    return args


def _complete_default_command(env: dict[str, str]) -> None:
    """Shell completion sees the words typed, not :func:`_argv_with_default_command`'s: make
    ``powersweep --load-mode <TAB>`` complete like ``powersweep sweep --load-mode <TAB>``."""
    if "COMP_WORDS" in env:  # bash
        words = env["COMP_WORDS"].split()
        if len(words) > 1 and _argv_with_default_command(words[1:2])[0] != words[1]:
            env["COMP_WORDS"] = " ".join([words[0], "sweep", *words[1:]]) + (
                " " if env["COMP_WORDS"].endswith(" ") else ""
            )
            env["COMP_CWORD"] = str(int(env.get("COMP_CWORD", "0")) + 1)
    elif "_TYPER_COMPLETE_ARGS" in env:  # zsh, fish
        words = env["_TYPER_COMPLETE_ARGS"].split(" ")
        if len(words) > 1 and words[1] and _argv_with_default_command(words[1:2])[0] != words[1]:
            env["_TYPER_COMPLETE_ARGS"] = " ".join([words[0], "sweep", *words[1:]])


def _flags_take_no_value(command: Any) -> None:
    """Show flags in help without a value type: typer's rich help prints ``<bool>`` after every
    flag (``--dry-run <bool>``), which reads as if it took a value. An empty metavar shows
    nothing there; the help option, made on first use, is made now to get the same."""
    help_option = command.get_help_option(typer.Context(command))
    for param in [*command.params, help_option]:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
    if isinstance(command, TyperGroup):
        for sub in command.commands.values():
            _flags_take_no_value(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``powersweep`` console script; returns the exit code."""
    if (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    ):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    args = _argv_with_default_command(sys.argv[1:] if argv is None else argv)
    if "_POWERSWEEP_COMPLETE" in os.environ:
        env = dict(os.environ)
        _complete_default_command(env)
        os.environ.update(env)
    try:
        command = typer.main.get_command(app)
        _flags_take_no_value(command)
        # without standalone mode click returns the code of an Exit instead of raising it
        rc = command.main(args=args, prog_name="powersweep", standalone_mode=False)
    except typer.Exit as exc:
        return int(getattr(exc, "exit_code", 0))
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # bad usage: unknown option, unparsable value
        print(f"error: {one_line(exc.format_message())}", file=sys.stderr)
        return 2
    except PowersweepError as exc:
        print(f"error: {one_line(str(exc))}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        signalled = _signal_within(exc)
        if isinstance(signalled, PowersweepError):
            print(f"error: {one_line(str(signalled))}", file=sys.stderr)
            return signalled.exit_code
        if signalled is not None:
            print("error: interrupted", file=sys.stderr)
            return 130
        if os.environ.get("POWERSWEEP_DEBUG"):
            raise
        print(
            f"error: internal error: {type(exc).__name__}: {one_line(str(exc))} "
            "(set POWERSWEEP_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
    return rc if isinstance(rc, int) else 0


def _signal_within(exc: BaseException) -> BaseException | None:
    """The Ctrl-C or handled signal (``SweepInterrupted``) an exception wraps, if any: Python
    3.11 wraps one raised while a class is created (a module imported late, mid-command) in a
    ``RuntimeError`` ("Error calling __set_name__"), which must still end as the signal does."""
    seen: set[int] = set()
    inner: BaseException | None = exc
    while inner is not None and id(inner) not in seen:
        seen.add(id(inner))
        if isinstance(inner, KeyboardInterrupt) or hasattr(inner, "signum"):
            return inner
        inner = inner.__cause__ or inner.__context__
    return None


if __name__ == "__main__":
    sys.exit(main())
