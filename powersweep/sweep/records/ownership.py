"""Files a sudo run writes belong to the user who typed ``sudo``, not to root.

``sudo powersweep ...`` runs as root, so without care the run directory (and an ``--out``
directory it created) would be root-owned in the user's home and they could not delete or
re-analyse it. ``sudo`` records the invoking user in ``SUDO_UID``/``SUDO_GID``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Owner:
    """A uid/gid pair to hand files to."""

    uid: int
    gid: int


def invoking_user(environ: Mapping[str, str] | None = None) -> Owner | None:
    """The user behind ``sudo`` (``SUDO_UID``/``SUDO_GID``), or None when not under sudo.

    Malformed values count as "not under sudo": handing files to a wrong uid would be worse
    than leaving them root-owned.
    """
    env = os.environ if environ is None else environ
    uid, gid = env.get("SUDO_UID", ""), env.get("SUDO_GID", "")
    if not (uid.isdigit() and gid.isdigit()):
        return None
    return Owner(int(uid), int(gid))


def hand_over(
    paths: list[Path],
    owner: Owner | None,
    *,
    chown: Callable[[str, int, int], None] | None = None,
    warn: Callable[[str], None] = lambda _m: None,
) -> int:
    """Give each path (and, for directories, everything below) to ``owner``.

    Symlinks are not followed, so a link planted in a run directory cannot make root chown a
    file elsewhere.

    Args:
        paths: Files or directory trees; missing ones are skipped.
        owner: Who gets them; None does nothing.
        chown: ``os.lchown``-like function (tests inject a recorder).
        warn: Where a failure is reported (the run itself is fine, only its owner is wrong).

    Returns:
        How many paths were changed.
    """
    if owner is None:
        return 0
    do = chown or os.lchown
    changed = 0
    for top in paths:
        if not top.exists():
            continue
        todo = [top]
        if top.is_dir() and not top.is_symlink():
            for dirpath, dirnames, filenames in os.walk(top):
                base = Path(dirpath)
                todo.extend(base / n for n in dirnames)
                todo.extend(base / n for n in filenames)
        for p in todo:
            try:
                do(str(p), owner.uid, owner.gid)
                changed += 1
            except OSError as exc:
                warn(f"cannot hand {p} to uid {owner.uid}: {exc.strerror or exc}")
                return changed
    return changed
