"""Which local processes serve a URL (``sweep/server/local.py``), read from a fake ``/proc``
tree: the processes listening on the URL's port and their descendants, only for a local host."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from powersweep.sweep.server.local import local_server_pids

HEADER = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid\n"


def _socket_line(port: int, inode: int, state: str = "0A") -> str:
    return (
        f"   0: 0100007F:{port:04X} 00000000:0000 {state} 00000000:00000000 00:00000000 "
        f"00000000  1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
    )


def _proc(tmp_path: Path, tcp: list[str], tcp6: list[str] | None = None) -> Path:
    proc = tmp_path / "proc"
    (proc / "net").mkdir(parents=True)
    (proc / "net" / "tcp").write_text(HEADER + "".join(tcp))
    if tcp6 is not None:
        (proc / "net" / "tcp6").write_text(HEADER + "".join(tcp6))
    (proc / "self").mkdir()  # not a PID
    return proc


def _process(proc: Path, pid: int, ppid: int, sockets: tuple[int, ...] = (), name: str = "x"):
    entry = proc / str(pid)
    (entry / "fd").mkdir(parents=True)
    (entry / "stat").write_text(f"{pid} ({name}) S {ppid} {pid} {pid} 0 -1 4194560 0 0\n")
    for k, inode in enumerate(sockets):
        os.symlink(f"socket:[{inode}]", entry / "fd" / str(3 + k))
    os.symlink("/dev/null", entry / "fd" / "0")


def test_the_listener_and_its_descendants_serve_the_url(tmp_path: Path) -> None:
    proc = _proc(tmp_path, [_socket_line(8080, 5555), _socket_line(9000, 6666)])
    _process(proc, 100, 1, (5555,), name="llama server (main)")
    _process(proc, 101, 100)  # a worker it started
    _process(proc, 102, 101)  # and its child
    _process(proc, 200, 1, (6666,))  # listens on another port
    _process(proc, 300, 1)
    assert local_server_pids("http://127.0.0.1:8080", proc) == {100, 101, 102}
    assert local_server_pids("http://localhost:9000/v1", proc) == {200}


def test_a_socket_that_is_not_listening_is_no_server(tmp_path: Path) -> None:
    proc = _proc(tmp_path, [_socket_line(8080, 5555, state="01")])
    _process(proc, 100, 1, (5555,))
    assert local_server_pids("http://127.0.0.1:8080", proc) == frozenset()


def test_ipv6_listeners_and_the_schemes_default_ports_count(tmp_path: Path) -> None:
    proc = _proc(tmp_path, [], tcp6=[_socket_line(443, 7777), _socket_line(80, 8888)])
    _process(proc, 100, 1, (7777,))
    _process(proc, 200, 1, (8888,))
    assert local_server_pids("https://[::1]", proc) == {100}
    assert local_server_pids("http://0.0.0.0", proc) == {200}


@pytest.mark.parametrize(
    "url", ["http://10.1.2.3:8080", "http://gpu-node-7:8080", "http://:8080", "http://h:99999"]
)
def test_a_server_on_another_machine_or_a_bad_url_finds_nothing(tmp_path: Path, url: str) -> None:
    proc = _proc(tmp_path, [_socket_line(8080, 5555)])
    _process(proc, 100, 1, (5555,))
    assert local_server_pids(url, proc) == frozenset()


def test_this_machines_own_name_is_local(tmp_path: Path) -> None:
    proc = _proc(tmp_path, [_socket_line(8080, 5555)])
    _process(proc, 100, 1, (5555,))
    assert local_server_pids(f"http://{socket.gethostname()}:8080", proc) == {100}


def test_a_parent_loop_or_unreadable_entries_do_not_hang_or_fail(tmp_path: Path) -> None:
    proc = _proc(tmp_path, [_socket_line(8080, 5555)])
    _process(proc, 100, 1, (5555,))
    _process(proc, 200, 201)
    _process(proc, 201, 200)  # a loop no real /proc has: never followed forever
    (proc / "300").mkdir()  # gone between the listing and the read: no stat, no fd
    (proc / "400").mkdir()
    (proc / "400" / "stat").write_text("garbage")
    assert local_server_pids("http://127.0.0.1:8080", proc) == {100}


def test_without_a_proc_tree_nothing_is_found(tmp_path: Path) -> None:
    assert local_server_pids("http://127.0.0.1:8080", tmp_path / "none") == frozenset()
