"""The floor under any asyncio load generator's CPU per token: reads that do nothing.

A token stream is one network read per token (a server writes each token's event as it is made,
and at a few to a hundred tokens per second per stream the reads do not coalesce). This measures
what those reads cost a Python process on this machine before any parsing: a server process
writes a vLLM-sized chunked SSE event per token on N connections at the aggregate rate, and a
client process reads them with a protocol that only counts (uvloop's loop, as the sweep uses,
and asyncio's own for comparison). It prints the client's CPU per read and per 1,000 tokens, the
kernel's share included.

It is the part of ``bench_client_sweep.py``'s figure that no parser, transport or accounting
change can remove; the rest of the sweep's CPU (imports, requests, parsing, analysis) comes on
top of it.

Usage: python scripts/bench_read_floor.py [--streams 64,256] [--aggregate 3000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

# argv: port file, per-stream tokens/s. Writes one chunked SSE event per token per connection.
SERVER = textwrap.dedent(
    """
    import asyncio, random, sys
    import uvloop
    EVENT = (b'data: {"id":"chatcmpl-0","object":"chat.completion.chunk","created":1,'
             b'"model":"m","choices":[{"index":0,"delta":{"content":" tok"},'
             b'"logprobs":null,"finish_reason":null}]}\\n\\n')
    CHUNK = f"{len(EVENT):x}\\r\\n".encode() + EVENT + b"\\r\\n"
    RATE = float(sys.argv[2])

    async def handle(reader, writer):
        await asyncio.sleep(random.random() / RATE)
        try:
            while True:
                writer.write(CHUNK)
                await asyncio.sleep(1 / RATE)
        except (ConnectionError, RuntimeError):
            pass

    async def main():
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        with open(sys.argv[1], "w") as out:
            out.write(str(server.sockets[0].getsockname()[1]))
        await server.serve_forever()

    uvloop.run(main())
    """
)

# argv: port, streams, seconds, loop ("uvloop" or "asyncio"). Prints "reads cpu_s".
CLIENT = textwrap.dedent(
    """
    import asyncio, sys, time
    port, streams, seconds, which = sys.argv[1:5]
    port, streams, seconds = int(port), int(streams), float(seconds)
    reads = 0

    class Count(asyncio.Protocol):
        def data_received(self, data):
            global reads
            reads += 1

    async def main():
        loop = asyncio.get_running_loop()
        conns = [await loop.create_connection(Count, "127.0.0.1", port) for _ in range(streams)]
        await asyncio.sleep(1.0)  # every connection streaming
        r0, c0 = reads, time.process_time()
        await asyncio.sleep(seconds)
        print(reads - r0, time.process_time() - c0)
        for transport, _ in conns:
            transport.close()

    if which == "uvloop":
        import uvloop
        uvloop.run(main())
    else:
        asyncio.run(main())
    """
)


def measure(port: int, streams: int, seconds: float, loop: str) -> tuple[int, float]:
    """(reads, client CPU seconds) over ``seconds`` of streaming."""
    out = subprocess.run(
        [sys.executable, "-c", CLIENT, str(port), str(streams), str(seconds), loop],
        capture_output=True,
        text=True,
        check=True,
        timeout=seconds + 60,
    )
    reads, cpu = out.stdout.split()
    return int(reads), float(cpu)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", default="64,256", help="stream counts")
    parser.add_argument("--aggregate", type=float, default=3000.0, help="tokens/s, all streams")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per run")
    args = parser.parse_args()
    print(f"{'streams':>7} {'loop':>8} {'reads/s':>8} {'CPU us/read':>11} {'CPU s/1k':>9}")
    for streams in (int(x) for x in args.streams.split(",")):
        port_file = Path(tempfile.mkdtemp(prefix="bench-read-floor-")) / "port"
        server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(port_file), repr(args.aggregate / streams)]
        )
        try:
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text()):
                if time.monotonic() > deadline or server.poll() is not None:
                    raise RuntimeError("the server process did not start")
                time.sleep(0.05)
            port = int(port_file.read_text())
            for loop in ("uvloop", "asyncio"):
                reads, cpu = measure(port, streams, args.seconds, loop)
                print(
                    f"{streams:>7} {loop:>8} {reads / args.seconds:>8.0f} "
                    f"{1e6 * cpu / reads:>11.1f} {1000 * cpu / reads:>9.4f}",
                    flush=True,
                )
        finally:
            server.terminate()
            server.wait(timeout=30)
            port_file.unlink(missing_ok=True)
            port_file.parent.rmdir()
    print(
        f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores; one read per token, "
        "so CPU s/1k is per 1,000 tokens"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
