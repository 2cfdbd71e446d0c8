"""The package's prose stays true: every Sphinx-style reference (``:mod:``, ``:func:``, ``:class:``,
``:meth:``, ``:data:``, ``:attr:``) in powersweep's sources and in docs/ names something that
exists, and every module header stays a few lines (the reasoning lives in docs/)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import textwrap
import types
from pathlib import Path

import pytest

from tests.paths import REPO

PACKAGE = REPO / "powersweep"
SOURCES = sorted(PACKAGE.rglob("*.py"))
PAGES = sorted([REPO / "README.md", *(REPO / "docs").glob("*.md")])
HEADER_MAX_WORDS = 120

_REF = re.compile(r":(mod|func|class|meth|data|attr):`([^`]+)`")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _import_or_none(name: str) -> types.ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def _instance_attributes(klass: type) -> set[str]:
    """The ``self.<name>`` a class's own methods assign (no class attribute until then)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
    except (OSError, TypeError):
        return set()
    return {
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.ctx, ast.Store)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
    }


def _has(owner: object, attr: str) -> bool:
    """An attribute of a module or class, a dataclass's or msgspec struct's field included (a
    field without a default is no class attribute), a Protocol's annotated member and an
    attribute the class's methods set on ``self``."""
    if hasattr(owner, attr):
        return True
    if isinstance(owner, type):
        return any(
            attr in getattr(klass, "__annotations__", {})
            or attr in getattr(klass, "__struct_fields__", ())
            or attr in _instance_attributes(klass)
            for klass in owner.__mro__
            if klass.__module__.startswith("powersweep")
        )
    return False


def _resolves(dotted: str) -> bool:
    """Whether ``dotted`` names a module, or an attribute reached from the longest importable
    module prefix by getattr."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        owner: object | None = _import_or_none(".".join(parts[:cut]))
        if owner is None:
            continue
        for attr in parts[cut:]:
            if not _has(owner, attr):
                return False
            owner = getattr(owner, attr, None)
        return True
    return False


def _imported_names(module: str) -> dict[str, str]:
    """The names a module imports, also under ``TYPE_CHECKING`` (absent at run time), with the
    dotted path each stands for."""
    path = PACKAGE.parent / (module.replace(".", "/") + ".py")
    if not path.exists():
        path = PACKAGE.parent / module.replace(".", "/") / "__init__.py"
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: dict[str, str] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                names[alias.asname or alias.name] = f"{base}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                names[alias.asname or alias.name.partition(".")[0]] = (
                    alias.name if alias.asname else alias.name.partition(".")[0]
                )
    return names


def candidates(target: str, module: str | None, classes: tuple[str, ...] = ()) -> list[str]:
    """The dotted paths a reference may stand for, as Sphinx's Python domain reads it from
    ``module`` inside ``classes`` (the classes around it, outermost first): a leading ``.``
    relative to the module's package (``..`` its parent's) or the module itself, a bare name in
    the enclosing class, the module's namespace (its own or an imported name) or its package,
    else absolute."""
    target = re.sub(r"\s+", "", target).lstrip("~").removesuffix("()")
    if module is None:
        return [target, f"powersweep.{target.lstrip('.')}"]
    is_package = (PACKAGE.parent / module.replace(".", "/") / "__init__.py").exists()
    package = module if is_package else module.rpartition(".")[0]
    if target.startswith(".."):
        return [f"{package.rpartition('.')[0]}.{target[2:]}"]
    if target.startswith("."):
        rest = target[1:]
        return [f"{package}.{rest}", f"{module}.{rest}"]
    head, _, tail = target.partition(".")
    out = [".".join([module, *classes[:n], target]) for n in range(len(classes), 0, -1)]
    out.append(f"{module}.{target}")
    imported = _imported_names(module)
    if head in imported:
        out.append(imported[head] + (f".{tail}" if tail else ""))
    out += [f"{package}.{target}", target, f"powersweep.{target}"]
    return out


Reference = tuple[str, str | None, tuple[str, ...], str, str]


def _classes_around(tree: ast.Module, line: int) -> tuple[str, ...]:
    """The names of the classes whose body holds ``line``, outermost first."""
    out: list[str] = []
    body: list[ast.stmt] = tree.body
    while True:
        inner = [
            node
            for node in body
            if isinstance(node, ast.ClassDef)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ]
        if not inner:
            return tuple(out)
        out.append(inner[0].name)
        body = inner[0].body


def references() -> list[Reference]:
    """Every reference as (where, referencing module, classes around it, role, target)."""
    out: list[Reference] = []
    for path in SOURCES:
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        where, module = str(path.relative_to(REPO)), module_name(path)
        for m in _REF.finditer(text):
            classes = _classes_around(tree, text.count("\n", 0, m.start()) + 1)
            out.append((where, module, classes, m.group(1), m.group(2)))
    for page in PAGES:
        for m in _REF.finditer(page.read_text(encoding="utf-8")):
            out.append((str(page.relative_to(REPO)), None, (), m.group(1), m.group(2)))
    return out


def broken_references() -> list[str]:
    bad = []
    for where, module, classes, role, target in references():
        found = [c for c in candidates(target, module, classes) if _resolves(c)]
        if role == "mod":
            found = [c for c in found if _import_or_none(c) is not None]
        if not found:
            bad.append(f"{where}: :{role}:`{target}`")
    return bad


def test_the_scan_reads_references() -> None:
    """The pattern finds references at all (a scan that finds none would pass any tree)."""
    roles = {role for _, _, _, role, _ in references()}
    assert roles == {"mod", "func", "class", "meth", "data", "attr"}


def test_every_reference_names_something_that_exists() -> None:
    assert broken_references() == []


@pytest.mark.parametrize(
    ("target", "module", "ok"),
    [
        ("~.run_drift.fit_drift", "powersweep.analysis.precision", True),
        (".run_drift.no_such_function", "powersweep.analysis.precision", False),
        ("powersweep.analysis.noise", None, True),
        ("powersweep.analysis.no_such_module", None, False),
        ("Reading.pooled", "powersweep.analysis.precision", True),
    ],
)
def test_the_resolver_tells_a_real_target_from_a_missing_one(
    target: str, module: str | None, ok: bool
) -> None:
    assert any(_resolves(c) for c in candidates(target, module)) is ok


def header_words(path: Path) -> int:
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return len(doc.split()) if doc else 0


def test_every_module_header_is_a_few_lines() -> None:
    """What the module is and why, in a few lines; the reasoning belongs in docs/."""
    long = {
        str(p.relative_to(REPO)): n for p in SOURCES if (n := header_words(p)) > HEADER_MAX_WORDS
    }
    assert long == {}


def test_every_module_has_a_header() -> None:
    assert [str(p.relative_to(REPO)) for p in SOURCES if header_words(p) == 0] == []


_POINTER = re.compile(r'The reasoning: (docs/[\w.-]+\.md), "([\w.]+)"\.')


def test_every_header_pointer_finds_its_design_note() -> None:
    """A header that sends the reader to docs/ names a page with the module's own section."""
    pointers = [
        (str(p.relative_to(REPO)), m.group(1), m.group(2))
        for p in SOURCES
        for m in _POINTER.finditer(p.read_text(encoding="utf-8"))
    ]
    assert pointers
    missing = [
        f"{where}: {page} has no section `{module}`"
        for where, page, module in pointers
        if f"### `{module}`\n" not in (REPO / page).read_text(encoding="utf-8")
    ]
    assert missing == []
