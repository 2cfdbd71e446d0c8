"""An option declared once: a group's field carries its command-line flag (name, help, full
explanation, help panel, value parser, bounds) in ``dataclasses.field`` metadata.

The option groups (``powersweep.sweep.options``, ``powersweep.sim.sim_options``) declare their
fields with :func:`flag`; the CLI makes each command's flags from them
(``powersweep.cli.flag_params``), and docs/options.md follows. Nothing here imports the CLI.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

# The help panels, by concern (powersweep.cli.help_layout.PANEL_ORDER orders them)
LOAD = "Load"
MEASUREMENT = "Measurement"
POINTS = "Points"
UNDERVOLT = "Undervolt (--axis undervolt)"
CARD = "Card"
SERVER = "Server"
SAFETY = "Safety"
OUTPUT = "Output"
SIMULATION = "Simulation"

# The metadata key a field's Flag sits under
KEY = "flag"
# A flag whose default is its field's
FIELD_DEFAULT: Any = object()


@dataclass(frozen=True)
class Flag:
    """A field's command-line flag.

    Attributes:
        decls: The flag and its aliases, the long name first (``--gpu``, ``--gpus``).
        help: The one line ``--help`` shows.
        doc: The full explanation docs/options.md shows (None: the help says it all).
        panel: The ``--help`` panel.
        metavar: What follows the flag in ``--help``.
        takes: The type the flag takes where it is not the field's (text a parser reads).
        given_default: The flag's default where it is not the field's (None where the field's
            default is what an absent flag means).
        parse: Turns what the flag took into the field's value (a flag's text, the
            ``--no-...`` switch's negation).
        bounds: The lowest and highest value allowed, both included (checked by the group's
            validation, naming the flag).
        hidden: Left out of ``--help`` (the simulator's fault switches, old scripts' flags).
        envvar: The environment variable that gives it (shown in ``--help``).
        case_sensitive: False: a choice is matched whatever its case.
        reads: The field whose flag this field is read from (``--gpu all``'s ``all_gpus``):
            it has no flag of its own.
    """

    decls: tuple[str, ...] = ()
    help: str = ""
    doc: str | None = None
    panel: str | None = None
    metavar: str | None = None
    takes: Any = None
    given_default: Any = FIELD_DEFAULT
    parse: Callable[[Any], Any] | None = None
    bounds: tuple[float, float] | None = None
    hidden: bool = False
    envvar: str | None = None
    case_sensitive: bool = True
    reads: str | None = None

    @property
    def name(self) -> str:
        """The flag as messages name it (``--gpu``)."""
        return self.decls[0]

    @property
    def param(self) -> str:
        """The Python name of the flag's parameter (``--load-mode``: ``load_mode``)."""
        return self.name.lstrip("-").replace("-", "_")


def flag(default: Any, *decls: str, help: str = "", **spec: Any) -> Any:
    """A dataclass field (``default``) with its flag ``decls`` (see :class:`Flag` for ``spec``)."""
    return dataclasses.field(default=default, metadata={KEY: Flag(decls=decls, help=help, **spec)})


def read_from(field_name: str, parse: Callable[[Any], Any], default: Any) -> Any:
    """A field read from another field's flag (``parse`` its value), with no flag of its own."""
    return dataclasses.field(default=default, metadata={KEY: Flag(reads=field_name, parse=parse)})


def negated(value: bool) -> bool:
    """A ``--no-...`` switch's field: on unless the switch is given."""
    return not value


def flag_of(group: Any, name: str) -> Flag:
    """The flag declared on ``group``'s field ``name``.

    Raises:
        KeyError: The field has no flag.
    """
    for f in dataclasses.fields(group):
        if f.name == name and KEY in f.metadata:
            spec: Flag = f.metadata[KEY]
            return spec
    raise KeyError(f"{group.__name__}.{name} has no flag")


def flagged(group: Any) -> Iterator[tuple[dataclasses.Field[Any], Flag]]:
    """``group``'s fields that carry a flag, in their declared order."""
    for f in dataclasses.fields(group):
        if KEY in f.metadata:
            yield f, f.metadata[KEY]


def out_of_bounds(group: Any) -> str | None:
    """The first flagged field of the ``group`` instance outside its bounds, as one line
    naming its flag (None: every one within; a field left None takes its default)."""
    for f, spec in flagged(type(group)):
        value = getattr(group, f.name)
        if spec.bounds is None or value is None:
            continue
        low, high = spec.bounds
        if not (math.isfinite(value) and low <= value <= high):
            return f"{spec.name} must be {low:g} or more and at most {high:g}, got {value:g}"
    return None
