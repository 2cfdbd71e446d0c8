"""A command's flags made from its option groups, and the groups built back from what the flags
took: each option is declared once, on its group's field (:mod:`powersweep.flags`).

:func:`command` turns ``body(options: SweepOptions, ...)`` into the function typer reads (its
``__signature__`` and ``__annotations__``: one parameter per flagged field, groups nested in
groups included); :func:`shared` gives another command one group's flag.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Iterator, Mapping
from enum import Enum
from typing import Annotated, Any, get_type_hints

import typer

from powersweep.cli.help_layout import option
from powersweep.flags import FIELD_DEFAULT, KEY, Flag, flag_of

# The parameter a body names to be handed typer's context (the flags' raw values, ctx.params)
CTX = "ctx"


def option_info(spec: Flag, panel: str | None) -> Any:
    """The typer option of ``spec``, in ``panel`` (None: the command's plain Options)."""
    extra: dict[str, Any] = {}
    if spec.metavar is not None:
        extra["metavar"] = spec.metavar
    if spec.envvar is not None:
        extra.update(envvar=spec.envvar, show_envvar=True)
    if spec.hidden:
        extra["hidden"] = True
    if not spec.case_sensitive:
        extra["case_sensitive"] = False
    return option(*spec.decls, help=spec.help, doc=spec.doc, panel=panel, **extra)


def _is_group(hint: Any) -> bool:
    return isinstance(hint, type) and dataclasses.is_dataclass(hint)


def _takes(spec: Flag, hint: Any) -> Any:
    return spec.takes if spec.takes is not None else hint


def _default(field: dataclasses.Field[Any], spec: Flag, takes: Any) -> Any:
    if spec.given_default is not FIELD_DEFAULT:
        return spec.given_default
    default = field.default
    if isinstance(takes, type) and issubclass(takes, Enum) and not isinstance(default, takes):
        return takes(default)  # a field kept as text, its flag a choice
    return default


def shared(group: Any, name: str, panel: str | None) -> Any:
    """The typer option of ``group``'s field ``name``, for another command that takes the same
    flag, in its ``panel`` (``Annotated[the field's type, shared(...)] = group.name``: its
    default is the field's)."""
    return option_info(flag_of(group, name), panel)


def _params(group: Any) -> Iterator[inspect.Parameter]:
    hints = get_type_hints(group)
    for field in dataclasses.fields(group):
        spec: Flag | None = field.metadata.get(KEY)
        if spec is None:
            if _is_group(hints[field.name]):
                yield from _params(hints[field.name])
            continue
        if spec.reads is not None:
            continue
        takes = _takes(spec, hints[field.name])
        yield inspect.Parameter(
            spec.param,
            inspect.Parameter.KEYWORD_ONLY,
            annotation=Annotated[takes, option_info(spec, spec.panel)],
            default=_default(field, spec, takes),
        )


def build(group: Any, given: Mapping[str, Any]) -> Any:
    """The ``group`` the flags' values ``given`` (by parameter name) make, its nested groups
    included; a field without a flag keeps its default."""
    hints = get_type_hints(group)
    kwargs: dict[str, Any] = {}
    for field in dataclasses.fields(group):
        spec: Flag | None = field.metadata.get(KEY)
        if spec is None:
            if _is_group(hints[field.name]):
                kwargs[field.name] = build(hints[field.name], given)
            continue
        source = flag_of(group, spec.reads) if spec.reads is not None else spec
        value = given[source.param]
        kwargs[field.name] = spec.parse(value) if spec.parse is not None else value
    return group(**kwargs)


def command(body: Callable[..., None]) -> Callable[..., None]:
    """The typer command whose flags are those of ``body``'s groups (each parameter of ``body``
    annotated with a group; one named :data:`CTX` gets typer's context), in the order the
    groups and their fields are declared; it calls ``body`` with the groups built."""
    hints = get_type_hints(body)
    names = [n for n in inspect.signature(body).parameters if n != "return"]
    groups = {n: hints[n] for n in names if n != CTX}
    params = [p for group in groups.values() for p in _params(group)]
    if CTX in names:
        params.insert(
            0,
            inspect.Parameter(
                CTX, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context
            ),
        )
    seen: set[str] = set()
    for p in params:
        if p.name in seen:
            raise TypeError(f"{body.__name__}: two flags make the parameter {p.name}")
        seen.add(p.name)

    def generated(**given: Any) -> None:
        built = {n: build(group, given) for n, group in groups.items()}
        if CTX in names:
            built[CTX] = given[CTX]
        body(**built)

    generated.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    generated.__annotations__ = {p.name: p.annotation for p in params}
    generated.__name__ = body.__name__
    generated.__qualname__ = body.__qualname__
    generated.__doc__ = body.__doc__
    generated.__module__ = body.__module__
    return generated
