"""Which local processes serve a URL: the PIDs listening on its port (and their children).

The GPUs a sweep caps are the ones the server's process runs on.

The reasoning: docs/architecture.md, "powersweep.sweep.server.local".
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path
from urllib.parse import urlsplit

_LISTEN = "0A"  # TCP state LISTEN in /proc/net/tcp


def local_server_pids(base_url: str, proc: Path = Path("/proc")) -> frozenset[int]:
    """PIDs of the processes listening on the URL's port when its host is this machine, with
    their descendants (Ollama's runner, a vLLM worker); empty when none can be found."""
    try:
        parts = urlsplit(base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return frozenset()
    if not _is_local(parts.hostname or ""):
        return frozenset()
    inodes = _listening_inodes(proc, port)
    if not inodes:
        return frozenset()
    listeners: set[int] = set()
    parents: dict[int, int] = {}
    for entry in _pid_dirs(proc):
        pid = int(entry.name)
        parent = _parent_pid(entry)
        if parent is not None:
            parents[pid] = parent
        if _holds_socket(entry, inodes):
            listeners.add(pid)
    return frozenset(pid for pid in {*listeners, *parents} if _descends(pid, listeners, parents))


def _is_local(host: str) -> bool:
    if not host:
        return False
    if host in ("localhost", socket.gethostname()):
        return True
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return addr.is_loopback or addr.is_unspecified


def _listening_inodes(proc: Path, port: int) -> set[str]:
    inodes: set[str] = set()
    for name in ("net/tcp", "net/tcp6"):
        try:
            lines = (proc / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            try:
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
            except (IndexError, ValueError):
                continue
            if local_port == port:
                inodes.add(fields[9])
    return inodes


def _pid_dirs(proc: Path) -> list[Path]:
    try:
        return [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return []


def _parent_pid(entry: Path) -> int | None:
    try:
        stat = (entry / "stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses; split after the last ")"
    rest = stat.rsplit(")", 1)[-1].split()
    try:
        return int(rest[1])
    except (IndexError, ValueError):
        return None


def _holds_socket(entry: Path, inodes: set[str]) -> bool:
    try:
        fds = list((entry / "fd").iterdir())
    except OSError:
        return False  # another user's process without root: not readable
    for fd in fds:
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            return True
    return False


def _descends(pid: int, roots: set[int], parents: dict[int, int]) -> bool:
    seen: set[int] = set()
    while pid not in roots:
        if pid in seen or pid not in parents:
            return False
        seen.add(pid)
        pid = parents[pid]
    return True
