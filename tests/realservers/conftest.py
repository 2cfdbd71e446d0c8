"""Fixtures that run REAL inference servers on the CPU with generated tiny models.

The servers come from ``scripts/build_real_servers.sh`` (built once into a cache outside the
repo). Without them these tests skip, unless ``POWERSWEEP_REQUIRE_REAL_SERVERS=1`` (CI), where a
missing server or model generator is a failure. Servers are started once per session on free
loopback ports and stopped by their PID.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest

from powersweep.cli.rigs import build_rig
from powersweep.clock import real_clock
from powersweep.sweep.options import (
    Cooling,
    LoadMode,
    LoadOptions,
    MeasureOptions,
    OutputOptions,
    PointOptions,
    SafetyOptions,
    ServerOptions,
    SettleMode,
    SweepOptions,
)
from powersweep.sweep.sampling.windows import WindowPolicy
from powersweep.sweep.server.discovery import ServerInfo, discover_server
from powersweep.sweep.session import run_session
from tests.realservers.tinymodel import MEDIUM, TINY, ModelSpec, write_model

ENV_CACHE = "POWERSWEEP_REAL_SERVERS"
ENV_REQUIRE = "POWERSWEEP_REQUIRE_REAL_SERVERS"
BUILD_HINT = "run scripts/build_real_servers.sh (about 11 min once)"
# Context, slots (llama-server's default) and threads of every server here (the tests check them).
# One thread, and llama-server without its spin-wait (--poll 0): on a 2-core CI machine a
# server that spins on both cores delays the other pytest worker's simulated sweeps, whose
# time-scaled clocks turn every millisecond of scheduling delay into tens of run milliseconds.
CONTEXT_TOKENS = 4096
SLOTS = 4
THREADS = 1
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 10.0


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "realserver: runs a real inference server (scripts/build_real_servers.sh)"
    )


def cache_dir() -> Path:
    """Where scripts/build_real_servers.sh put the servers."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "powersweep" / "real-servers"


def required() -> bool:
    """True when absence of the real servers must fail the run (CI)."""
    return os.environ.get(ENV_REQUIRE, "").strip() not in ("", "0")


def unavailable(reason: str) -> NoReturn:
    """Skip, or fail when the real servers are required."""
    if required():
        pytest.fail(f"{reason} ({ENV_REQUIRE}=1)", pytrace=False)
    pytest.skip(reason)


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class RealServer:
    """A running server.

    Attributes:
        name: ``llama-server`` or ``llama-cpp-python``.
        url: Base URL (``http://127.0.0.1:PORT``).
        model_path: The GGUF it serves.
        pid: Process id.
        log_path: Its stdout and stderr.
    """

    name: str
    url: str
    model_path: Path
    pid: int
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        """The end of the server's log, for assertion messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _ready(url: str, path: str) -> bool:
    try:
        return httpx.get(url + path, timeout=2.0).status_code == 200
    except httpx.HTTPError:
        return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def run_server(
    name: str,
    argv: Sequence[str],
    port: int,
    model_path: Path,
    log_path: Path,
    ready_path: str,
) -> Iterator[RealServer]:
    """Start ``argv``, wait until ``ready_path`` answers 200, yield, then stop it by its PID.

    A server that exits or does not get ready within the timeout fails the test with its log.
    """
    url = f"http://127.0.0.1:{port}"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT)
    server = RealServer(name, url, model_path, proc.pid, log_path)
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not _ready(url, ready_path):
            if proc.poll() is not None:
                pytest.fail(
                    f"{name} exited with {proc.returncode} before it was ready:\n"
                    + server.log_tail(),
                    pytrace=False,
                )
            if time.monotonic() > deadline:
                pytest.fail(
                    f"{name} not ready within {READY_TIMEOUT_S:g} s:\n" + server.log_tail(),
                    pytrace=False,
                )
            time.sleep(0.2)
        yield server
    finally:
        _stop(proc)


def _model(tmp_path_factory: pytest.TempPathFactory, spec: ModelSpec) -> Path:
    try:
        import gguf  # noqa: F401
    except ImportError:
        unavailable("the gguf package is missing: pip install -e '.[dev]'")
    path = tmp_path_factory.mktemp("models") / f"{spec.name}.gguf"
    return write_model(path, spec)


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 64 x 2 model (protocol checks: hundreds of tokens per second)."""
    return _model(tmp_path_factory, TINY)


@pytest.fixture(scope="session")
def medium_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 768 x 12 model (timing checks: tens of tokens per second)."""
    return _model(tmp_path_factory, MEDIUM)


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    """The built llama-server binary, or skip (fail under POWERSWEEP_REQUIRE_REAL_SERVERS=1)."""
    path = cache_dir() / "bin" / "llama-server"
    if not os.access(path, os.X_OK):
        unavailable(f"llama-server not found at {path}: {BUILD_HINT}")
    return path


@pytest.fixture(scope="session")
def llama_cpp_python_bin() -> Path:
    """The Python of the llama-cpp-python[server] venv, or skip (fail when required)."""
    path = cache_dir() / "llama-cpp-python-venv" / "bin" / "python"
    if not os.access(path, os.X_OK):
        unavailable(f"llama-cpp-python not found at {path}: {BUILD_HINT}")
    return path


def llama_server_argv(
    binary: Path, model: Path, port: int, *, split_slots: bool = False
) -> list[str]:
    """The llama-server command line the test servers use.

    By default llama-server picks its slots itself (4) with one KV cache they share, so each
    request may use the whole ``-c``. ``split_slots`` passes ``-np 4`` explicitly, which splits
    the cache: each slot (each request) gets ``-c / 4`` tokens, and ``/props`` says so.
    """
    argv = [
        str(binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(CONTEXT_TOKENS),
        "-t",
        str(THREADS),
        "--poll",
        "0",
        "--metrics",
        "--no-webui",
    ]
    if split_slots:
        argv += ["-np", str(SLOTS)]
    return argv


def _start_llama_server(
    binary: Path,
    model: Path,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    split_slots: bool = False,
) -> contextlib.AbstractContextManager[RealServer]:
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / f"llama-server-{model.stem}-{port}.log"
    argv = llama_server_argv(binary, model, port, split_slots=split_slots)
    return run_server("llama-server", argv, port, model, log, "/health")


@pytest.fixture(scope="session")
def llama_server(
    llama_server_bin: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealServer]:
    """llama-server serving the tiny model."""
    with _start_llama_server(llama_server_bin, tiny_model, tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="session")
def llama_server_split_slots(
    llama_server_bin: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealServer]:
    """llama-server serving the tiny model with ``-np 4``: four slots of ``-c / 4`` tokens."""
    with _start_llama_server(
        llama_server_bin, tiny_model, tmp_path_factory, split_slots=True
    ) as server:
        yield server


@pytest.fixture(scope="session")
def llama_server_medium(
    llama_server_bin: Path, medium_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealServer]:
    """llama-server serving the medium model."""
    with _start_llama_server(llama_server_bin, medium_model, tmp_path_factory) as server:
        yield server


@pytest.fixture(scope="session")
def llama_cpp_python_server(
    llama_cpp_python_bin: Path, tiny_model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealServer]:
    """llama-cpp-python's OpenAI server (``python -m llama_cpp.server``) serving the tiny model."""
    port = free_port()
    log = tmp_path_factory.mktemp("logs") / "llama-cpp-python.log"
    argv = [
        str(llama_cpp_python_bin),
        "-m",
        "llama_cpp.server",
        "--model",
        str(tiny_model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        str(CONTEXT_TOKENS),
        "--n_threads",
        str(THREADS),
    ]
    with run_server("llama-cpp-python", argv, port, tiny_model, log, "/v1/models") as server:
        yield server


class TeeTransport(httpx.AsyncBaseTransport):
    """An httpx transport that keeps a copy of every response body the client reads, so a test
    can compare the client's accounting with what the server really sent."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.bodies: list[bytearray] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        body = bytearray()
        self.bodies.append(body)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        inner_stream: httpx.AsyncByteStream = response.stream

        class _Tee(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for part in inner_stream:
                    body.extend(part)
                    yield part

            async def aclose(self) -> None:
                await inner_stream.aclose()

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


def sse_payloads(body: bytes) -> list[dict[str, Any]]:
    """The JSON objects of an event-stream body (a deliberately naive second parser)."""
    out = []
    for line in body.decode().splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[len("data: ") :]))
    return out


# Short windows, a fixed settle; in real time the wait for a steady temperature costs 10 s a
# point, and the simulated card beside a real server tests nothing of it. Windows of 1 s failed
# points under the suite's contention (a first token later than a fifth of the window).
REAL_TIME_MEASURE = MeasureOptions(
    settle_s=0.5,
    settle_mode=SettleMode.FIXED,
    thermal_wait_max_s=0.0,
    sample_interval_s=0.1,
    windows=WindowPolicy(max_s=2.0),
)


def sweep_options(
    server: RealServer,
    tmp_path: Path,
    load_mode: str,
    *,
    load: dict[str, Any] | None = None,
    **extra: Any,
) -> SweepOptions:
    """A one-cap sweep on the simulated GPU against a real server, short and quiet (``load``:
    more of its load's options)."""
    base: dict[str, Any] = {
        "simulate": "rtx3090-air",
        # two warm-up requests, the short first one, then one of half a window: the pace the
        # first window is sized from (this tiny model decodes a short answer far faster than a
        # long one)
        "load": LoadOptions(mode=LoadMode(load_mode), warmup_requests=2, **(load or {})),
        "server": ServerOptions(url=server.url),
        "points": PointOptions(caps=(300.0,)),
        "measure": REAL_TIME_MEASURE,
        "output": OutputOptions(out=tmp_path, cooling=Cooling.AIR),
        "safety": SafetyOptions(state_dir=tmp_path / "state"),
    }
    return SweepOptions(**{**base, **extra})


def discover(server: RealServer) -> ServerInfo:
    """The real server's facts, as a sweep discovers them."""
    return asyncio.run(discover_server(server.url, model=None, api_key=None, clock=real_clock()))


def session_run_dir(server: RealServer, tmp_path: Path, load_mode: str, **extra: object) -> Path:
    """A sweep of the real server with :func:`sweep_options`: its run directory."""
    return run_session(sweep_options(server, tmp_path, load_mode, **extra), build_rig).run_dir
