"""Every amdsmi name the AMD backend and the fake use, checked against the installed package.

The amdsmi package (a dev dependency) cannot be imported here: it loads ROCm's libamd_smi.so
when imported, and this machine has no ROCm (importing raises KeyError after printing that the
library is missing). So the package's source is read instead, with ``ast``: the names its
``__init__.py`` exports, the functions and classes ``amdsmi_interface.py`` and
``amdsmi_exception.py`` define (with their parameter names), the enum members and their values
(which ``amdsmi_interface.py`` takes from ``amdsmi_wrapper.py``'s constants), the status codes,
and the keys of the dicts the functions return.

Then the helpers the backend shares: amdsmi's readings (``"N/A"``), its error codes and texts,
its performance level names, and the quiet import that names the fix when the package or ROCm's
library is missing.
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from enum import IntEnum
from pathlib import Path

import pytest

from powersweep.errors import GpuError
from powersweep.sim import amdsmi as fake_module
from powersweep.sim import amdsmi_types as fake_types
from powersweep.sweep.gpu import amd as backend_pkg
from powersweep.sweep.gpu.amd import amdsmi_api as api
from tests.fakes.fake_amdsmi import (
    AMDSMI_STATUS_INVAL,
    AmdSmiDevPerfLevel,
    FakeAmdsmi,
)

BACKEND_DIR = Path(backend_pkg.__file__).parent


def _package_dir() -> Path:
    spec = importlib.util.find_spec("amdsmi")  # finds it without running its __init__
    if spec is None or spec.origin is None:
        pytest.fail("the amdsmi package is not installed (it is in the dev extra)")
    return Path(spec.origin).parent


def _tree(name: str) -> ast.Module:
    return ast.parse((_package_dir() / name).read_text())


def _exports() -> dict[str, str]:
    """Name -> the submodule ``__init__.py`` imports it from (try blocks included)."""
    out = {}
    for node in ast.walk(_tree("__init__.py")):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            for alias in node.names:
                out[alias.asname or alias.name] = node.module
    return out


def _definitions(module: str) -> dict[str, ast.FunctionDef | ast.ClassDef]:
    return {
        n.name: n
        for n in _tree(f"{module}.py").body
        if isinstance(n, ast.FunctionDef | ast.ClassDef)
    }


def _wrapper_constants() -> dict[str, int]:
    out = {}
    for node in _tree("amdsmi_wrapper.py").body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, int)
        ):
            out[node.targets[0].id] = node.value.value
    return out


def _enum_members(cls: ast.ClassDef) -> dict[str, int]:
    """``MEMBER = amdsmi_wrapper.CONSTANT`` resolved to the constant's value."""
    constants = _wrapper_constants()
    out = {}
    for node in cls.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = node.value
            if isinstance(value, ast.Attribute) and value.attr in constants:
                out[node.targets[0].id] = constants[value.attr]
            elif isinstance(value, ast.Constant) and isinstance(value.value, int):
                out[node.targets[0].id] = value.value
    return out


def _used_by_backend() -> tuple[set[str], set[str]]:
    """The attributes the backend reads off the amdsmi module, and ``Enum.MEMBER`` chains."""
    names, members = set(), set()
    for path in BACKEND_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            base = node.value
            on_smi = (isinstance(base, ast.Name) and base.id == "smi") or (
                isinstance(base, ast.Attribute) and base.attr == "_smi"
            )
            if on_smi:
                names.add(node.attr)
            elif (
                isinstance(base, ast.Attribute)
                and isinstance(base.value, ast.Name)
                and base.value.id == "smi"
                and base.attr.startswith("AmdSmi")
            ):
                members.add(f"{base.attr}.{node.attr}")
    return names, members


def test_every_name_used_is_exported_and_defined_by_the_installed_amdsmi() -> None:
    exports = _exports()
    missing = [n for n in api.AMDSMI_API_USED if n not in exports]
    assert missing == []
    for name in api.AMDSMI_API_USED:
        assert name in _definitions(exports[name]), f"{name} not defined in {exports[name]}"
    # the deprecated names of amdsmi < 6 must not creep in
    assert not any(n.startswith("amdsmi_dev_") for n in api.AMDSMI_API_USED)


def test_the_backend_uses_exactly_the_listed_names_and_members() -> None:
    names, members = _used_by_backend()
    assert len(names) > 20
    assert names - set(api.AMDSMI_API_USED) == set()
    assert set(api.AMDSMI_API_USED) - names == set()
    assert members == set(api.AMDSMI_ENUM_MEMBERS_USED)


def test_every_enum_member_used_exists_with_the_fakes_value() -> None:
    interface = _definitions("amdsmi_interface")
    for used in api.AMDSMI_ENUM_MEMBERS_USED:
        enum, member = used.split(".")
        cls = interface[enum]
        assert isinstance(cls, ast.ClassDef)
        real = _enum_members(cls)
        assert member in real, used
        assert getattr(getattr(fake_types, enum), member) == real[member], used


def test_the_fakes_enums_match_the_real_ones_member_by_member() -> None:
    interface = _definitions("amdsmi_interface")
    enums = [t for t in fake_module._SURFACE_TYPES if issubclass(t, IntEnum)]
    assert len(enums) >= 6
    for enum in enums:
        cls = interface[enum.__name__]
        assert isinstance(cls, ast.ClassDef)
        real = _enum_members(cls)
        # aliases (GFX = SYS = 0) are members of the same value: compare names, not iteration
        fake = {name: int(value) for name, value in enum.__members__.items()}
        assert {n: real.get(n) for n in fake} == fake, enum.__name__


def test_status_codes_match_the_wrapper() -> None:
    constants = _wrapper_constants()
    for module in (api, fake_types):
        codes = {n: v for n, v in vars(module).items() if n.startswith("AMDSMI_STATUS_")}
        assert codes
        assert {n: constants.get(n) for n in codes} == codes, module.__name__


def test_the_fake_has_every_name_with_the_real_parameter_names() -> None:
    fake = FakeAmdsmi()
    assert [n for n in api.AMDSMI_API_USED if not hasattr(fake, n)] == []
    defined = {**_definitions("amdsmi_interface"), **_definitions("amdsmi_exception")}
    for name in api.AMDSMI_API_USED:
        real = defined[name]
        if not isinstance(real, ast.FunctionDef):
            continue
        real_params = [a.arg for a in real.args.args]
        fake_params = list(inspect.signature(getattr(fake, name)).parameters)
        assert fake_params == real_params, name


def test_the_exceptions_carry_the_attributes_read() -> None:
    exceptions = _definitions("amdsmi_exception")
    library = exceptions["AmdSmiLibraryException"]
    assigned = {
        n.attr
        for n in ast.walk(ast.Module(body=list(exceptions.values()), type_ignores=[]))
        if isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store)
    }
    assert {"err_code", "err_info"} <= assigned
    assert isinstance(library, ast.ClassDef)
    assert [b.id for b in library.bases if isinstance(b, ast.Name)] == ["AmdSmiException"]
    assert issubclass(fake_types.AmdSmiLibraryException, fake_types.AmdSmiException)


# The keys the backend reads from what amdsmi returns (a renamed key would read as N/A forever).
KEYS_READ = (
    "market_name",
    "vram_size",
    "driver_version",
    "mode",
    "power_cap",
    "default_power_cap",
    "min_power_cap",
    "max_power_cap",
    "current_socket_power",
    "average_socket_power",
    "energy_accumulator",
    "counter_resolution",
    "clk",
    "gfx_activity",
    "num_supported",
    "frequency",
    "active_ppt_pwr",
    "active_socket_thrm",
    "active_prochot_thrm",
    "active_vr_thrm",
    "active_hbm_thrm",
    "pid",
    "mem",
    "memory_usage",
    "vram_mem",
)


def test_every_key_read_is_one_the_installed_amdsmi_returns() -> None:
    strings = {
        n.value
        for n in ast.walk(_tree("amdsmi_interface.py"))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }
    assert [k for k in KEYS_READ if k not in strings] == []
    source = "\n".join(p.read_text() for p in BACKEND_DIR.glob("*.py"))
    assert [k for k in KEYS_READ if f'"{k}"' not in source] == []  # and the backend reads them


# --- the helpers ---------------------------------------------------------------------------


def test_status_codes_and_causes_of_amdsmis_exceptions() -> None:
    exc = fake_module.AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    assert api.status_code(exc) == AMDSMI_STATUS_INVAL
    # the library's own str() spans two lines: the one-line description is used
    assert "\n" in str(exc)
    assert api.cause(exc) == " (amdsmi: AMDSMI_STATUS_INVAL - Invalid parameters)"
    # a parameter error has no status code, and its text is squeezed onto one line
    param = fake_module.AmdSmiParameterException(1, str, "bad\n  handle")
    assert api.status_code(param) is None
    assert api.cause(param) == " (amdsmi: bad handle)"
    assert api.status_code(ValueError("x")) is None


@pytest.mark.parametrize(
    ("value", "name"),
    [
        ("AMDSMI_DEV_PERF_LEVEL_AUTO", "AUTO"),
        ("AMDSMI_DEV_PERF_LEVEL_MANUAL", "MANUAL"),
        (AmdSmiDevPerfLevel.MANUAL, "MANUAL"),  # older amdsmi: the enum itself
        ("stable_peak", "STABLE_PEAK"),
    ],
)
def test_performance_levels_read_by_their_short_name(value: object, name: str) -> None:
    assert api.perf_level_name(value) == name


@pytest.fixture
def amdsmi_source(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Callable[[str], None]]:
    """Write an ``amdsmi`` module that shadows the installed one (its import is the test)."""
    saved = sys.modules.pop("amdsmi", None)
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(source: str) -> None:
        (tmp_path / "amdsmi.py").write_text(source)
        importlib.invalidate_caches()

    yield write
    sys.modules.pop("amdsmi", None)
    if saved is not None:
        sys.modules["amdsmi"] = saved


def test_the_import_is_quiet_and_returns_the_module(
    amdsmi_source: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    amdsmi_source("print('amdsmi says hello on stdout')\nMARK = 7\n")
    module = api.import_amdsmi()
    assert module.MARK == 7
    assert capsys.readouterr().out == ""


def test_a_library_that_cannot_load_names_rocm_and_the_fix_quietly(
    amdsmi_source: Callable[[str], None], capsys: pytest.CaptureFixture[str]
) -> None:
    # what the real package does without ROCm: print, then raise KeyError
    amdsmi_source("print('libamd_smi.so not found')\nraise KeyError('ROCM_PATH')\n")
    with pytest.raises(GpuError) as info:
        api.import_amdsmi()
    message = str(info.value)
    assert message.startswith("amdsmi not available: the amdsmi package cannot load ROCm's")
    assert "(KeyError: 'ROCM_PATH')" in message and api.INSTALL_HINT in message
    assert capsys.readouterr().out == ""


def test_a_missing_dependency_inside_amdsmi_is_not_a_missing_amdsmi(
    amdsmi_source: Callable[[str], None],
) -> None:
    amdsmi_source("import powersweep_no_such_module_xyz\n")
    with pytest.raises(GpuError, match=r"cannot load ROCm's libamd_smi.so \(ModuleNotFoundError"):
        api.import_amdsmi()


def test_without_the_package_the_error_says_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # makes the import fail
    with pytest.raises(GpuError) as info:
        api.import_amdsmi()
    assert str(info.value) == (
        f"amdsmi not available: the amdsmi package is not installed ({api.INSTALL_HINT})"
    )
