"""Every file the tool writes goes through here: never through a link another user planted.

The tool often runs as root, in directories others can write to (``/tmp``, a user's ``--out``).

The reasoning: docs/architecture.md, "powersweep.safe_files".
"""

from __future__ import annotations

import contextlib
import errno
import os
import pwd
import secrets
import stat
from pathlib import Path

from powersweep.errors import UsageError

# Flags every open here carries: no link followed, no descriptor leaked into a child.
_SAFE = os.O_NOFOLLOW | os.O_CLOEXEC


def private_dir(path: Path, *, fix: str, create: bool = True) -> Path:
    """Create ``path`` mode 0700 (parents as the umask says), or check the one that is there.

    Args:
        path: The directory.
        fix: What the user can do instead, appended to a refusal (e.g. "set POWERSWEEP_LOCK_DIR").
        create: False: only check it, when it exists (a reader creates nothing).

    Returns:
        ``path``.

    Raises:
        UsageError: It is a link or not a directory, belongs to another user, or others may
            write into it (the message names it, its owner and ``fix``).
    """
    if create:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise UsageError(f"cannot create {path}: {exc.strerror or exc} ({fix})") from None
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if create:
            raise
        return path
    euid = os.geteuid()
    why = None
    if stat.S_ISLNK(st.st_mode):
        why = f"is a symbolic link to {os.readlink(path)}"
    elif not stat.S_ISDIR(st.st_mode):
        why = "is not a directory"
    elif st.st_uid not in (euid, 0):
        # root's own directories are safe for everyone; a user's are not for root
        why = f"belongs to {_user(st.st_uid)}, not to {_user(euid)}"
    elif st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        why = f"can be written by others (mode {mode:04o}, owner {_user(st.st_uid)})"
    if why is not None:
        raise UsageError(f"refusing to use {path}: it {why} ({fix})")
    return path


def open_no_follow(path: Path, flags: int, mode: int = 0o666) -> int:
    """``os.open`` that refuses a link or a non-regular file, and for writing one with other
    hard links.

    Raises:
        UsageError: ``path`` is a symbolic link or no plain file (one line naming it).
        OSError: Any other failure, as ``os.open`` raises it.
    """
    try:
        fd = os.open(path, flags | _SAFE, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UsageError(_link_refusal(path)) from None
        raise
    st = os.fstat(fd)
    writes = flags & (os.O_WRONLY | os.O_RDWR)
    if not stat.S_ISREG(st.st_mode) or (writes and st.st_nlink > 1):
        # a hard link to another file is the same attack as a symbolic one
        os.close(fd)
        raise UsageError(f"refusing to open {path}: it is not a plain file of its own; remove it")
    return fd


def read_bytes(path: Path) -> bytes:
    """A file's content, read without following a link at ``path``.

    Raises:
        UsageError: ``path`` is a link (see :func:`open_no_follow`).
        OSError: It cannot be read (``FileNotFoundError`` when missing).
    """
    fd = open_no_follow(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        return f.read()


def append(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Append ``data`` in one write (the file created if missing), flushed to disk.

    Raises:
        UsageError: ``path`` is a link (see :func:`open_no_follow`).
        OSError: It cannot be written.
    """
    fd = open_no_follow(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(
    path: Path,
    data: bytes | str,
    *,
    mode: int | None = None,
    owner: tuple[int, int] | None = None,
    exclusive: bool = False,
    sync: bool = True,
) -> None:
    """Write ``path`` whole or not at all: a fresh file beside it, renamed over it.

    A link at ``path`` is replaced by the file, its target untouched.

    Args:
        path: The file.
        data: Its content (``str`` as UTF-8).
        mode: Its exact mode; None: a new file's (0666 less the umask).
        owner: ``(uid, gid)`` to give it before it appears.
        exclusive: Create it only if nothing is at ``path`` (``FileExistsError`` otherwise).
        sync: Flush it to disk before the rename.

    Raises:
        OSError: It cannot be written (the temporary file is removed).
    """
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = _fresh_beside(path, 0o600 if mode is not None else 0o666)
    try:
        try:
            os.write(fd, raw)
            if owner is not None:
                os.fchown(fd, *owner)
            if mode is not None:
                os.fchmod(fd, mode)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(tmp, path)  # fails on anything at path, a link included
            os.unlink(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _fresh_beside(path: Path, mode: int) -> tuple[int, Path]:
    # A random name created with O_EXCL: no name another user could have planted a link at.
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _SAFE, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(path.parent))


def _link_refusal(path: Path) -> str:
    try:
        target = f" (to {os.readlink(path)})"
    except OSError:
        target = ""
    return f"refusing to open {path}: it is a symbolic link{target}; remove it"


def _user(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"
