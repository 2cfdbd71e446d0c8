"""``python -m powersweep ARGS`` in a child forked from a process that imported it already.

The end-to-end tests run the command a few hundred times; each fresh interpreter spends about a
second importing numpy, scipy, polars and the package before it does anything. A forkserver
(:mod:`multiprocessing`) imports them once per test worker and forks a clean child per command:
its own environment, working directory, argv, stdout and stderr (files), exit code. Commands a
test signals or runs side by side still start their own interpreter (``conftest``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import pkgutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import powersweep

MAIN = str(Path(powersweep.__file__).with_name("__main__.py"))


def preload() -> None:
    """Import every module of the package (the ones a command imports late too: the simulated
    rig, the analysis, the charts), once, in the forkserver."""
    for module in pkgutil.walk_packages(powersweep.__path__, "powersweep."):
        if module.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):  # an optional backend (amdsmi) absent
            importlib.import_module(module.name)


preload()


def run(args: Sequence[str], env: Mapping[str, str], cwd: str, out: str, err: str) -> None:
    """The child: ``python -m powersweep ARGS`` as a fresh interpreter would run it."""
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    sys.argv = [MAIN, *args]
    from powersweep.cli import main

    try:
        rc = main(list(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(rc)
