"""A sweep against a server whose streamed answers are malformed HTTP/1.1, through the CLI:
no token of them is counted, each cap fails with the reason in words, the run ends within
seconds and the card gets its limit back.

The server is the simulated one on a real socket, behind a proxy that rewrites the framing of
its event streams (discovery's answers, with a Content-Length, pass untouched)."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.integration.conftest import only_run_dir, powersweep, read_csv, read_json

UUID = "GPU-sim-rtx3090-air-0"
USER_LIMIT_W = 350.0

Rewrite = Callable[[bytes], bytes]


def _gzip_coding(data: bytes) -> bytes:
    return data.replace(
        b"\r\ntransfer-encoding: chunked\r\n", b"\r\ntransfer-encoding: chunked, gzip\r\n"
    )


def _hex_prefix() -> Rewrite:
    """The first chunk size after each event stream's head written as ``0x..``, whether the
    head and the chunk come in one read or two."""
    after_head = False

    def rewrite(data: bytes) -> bytes:
        nonlocal after_head
        if after_head and data:
            data, after_head = b"0x" + data, False
        data = re.sub(rb"(chunked\r\n\r\n)([0-9a-fA-F]+\r\n)", rb"\g<1>0x\g<2>", data)
        after_head = data.endswith(b"chunked\r\n\r\n")
        return data

    return rewrite


def _gzip() -> Rewrite:
    return _gzip_coding


@contextmanager
def _proxy(upstream_port: int, rewriter: Callable[[], Rewrite]) -> Iterator[int]:
    """A TCP proxy on its own thread that passes the server's bytes through a ``rewriter()``
    of each connection."""
    loop = asyncio.new_event_loop()
    ports: list[int] = []
    started = threading.Event()
    stop = asyncio.Event()

    async def pipe(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, fix: Rewrite
    ) -> None:
        try:
            while data := await reader.read(65536):
                writer.write(fix(data))
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def handle(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", upstream_port)
        await asyncio.gather(
            pipe(client_r, server_w, lambda d: d), pipe(server_r, client_w, rewriter())
        )

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        ports.append(server.sockets[0].getsockname()[1])
        started.set()
        await stop.wait()
        server.close()
        current = asyncio.current_task()
        for task in asyncio.all_tasks():
            if task is not current:
                task.cancel()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    started.wait(10)
    try:
        yield ports[0]
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)
        loop.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("rewriter", "reason"),
    [
        (_gzip, "Transfer-Encoding b'chunked, gzip'"),
        (_hex_prefix, "malformed chunk size"),
    ],
    ids=["chunked, gzip", "chunk size 0x.."],
)
def test_a_sweep_against_malformed_framing_counts_nothing_and_restores(
    tmp_path: Path, rewriter: Callable[[], Rewrite], reason: str
) -> None:
    from powersweep.clock import ScaledClock
    from powersweep.sim.engine import ConstantEngine
    from powersweep.sim.server import SimServer

    state = tmp_path / "sim-state.json"
    state.write_text(json.dumps({UUID: USER_LIMIT_W}))
    env = {"POWERSWEEP_STATE_DIR": str(tmp_path / "state")}
    out = tmp_path / "runs"
    engine = ConstantEngine(ScaledClock(50.0), decode_tps=100.0)
    with SimServer(engine, flavour="vllm") as server:
        port = int(server.url.rstrip("/").rsplit(":", 1)[1])
        with _proxy(port, rewriter) as proxy_port:
            t0 = time.monotonic()
            proc = powersweep(
                "--simulate",
                "rtx3090-air",
                "--sim-state",
                str(state),
                "--url",
                f"http://127.0.0.1:{proxy_port}",
                "--caps",
                "300,350",
                "--max-failed-caps",
                "2",
                "--target-cap-seconds",
                "1",
                "--warmup-requests",
                "1",
                "--settle-seconds",
                "0",
                "--thermal-wait-seconds",
                "0",
                "--no-charts",
                "--quiet",
                "--out",
                str(out),
                env=env,
                timeout=120,
            )
            took_s = time.monotonic() - t0
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert took_s < 60
    run = only_run_dir(out)
    meta = read_json(run / "run.json")
    # the warm-up's requests all fail: the sweep stops before its first cap, saying why
    assert meta["status"] == "failed"
    assert "malformed HTTP answer after 0 tokens" in meta["error"] and reason in meta["error"]
    assert reason in proc.stderr.strip().splitlines()[-1]
    rows = read_csv(run / "requests.csv")
    assert rows
    for row in rows:
        assert row["ok"] == "false" and row["chunk_tokens"] == "0" and reason in row["error"]
    assert all(c["status"] != "ok" for c in read_csv(run / "caps.csv"))
    assert meta["restored"][0]["ok"]
    assert json.loads(state.read_text())[UUID] == USER_LIMIT_W
