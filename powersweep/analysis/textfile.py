"""Reading a text file a user hands in (a CSV, a pasted table) without guessing silently.

The reasoning: docs/analyze.md, "powersweep.analysis.textfile".
"""

from __future__ import annotations

import codecs
import stat
from pathlib import Path

from powersweep.errors import UsageError

# Signatures of binary files people pass by mistake, with what to tell them.
_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"PK\x03\x04", "a zip archive (an Excel .xlsx or ODS workbook?); export the sheet as CSV"),
    (b"\xd0\xcf\x11\xe0", "an old Excel .xls workbook; export the sheet as CSV"),
    (b"\x1f\x8b", "a gzip archive; unpack it first"),
    (b"\x89PNG", "a PNG image, not a table"),
    (b"\xff\xd8\xff", "a JPEG image, not a table"),
    (b"%PDF", "a PDF document, not a table"),
    (b"SQLite format 3", "an SQLite database, not a table"),
)
_UTF32 = (codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)
_UTF16 = ((codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


def read_text(path: Path) -> str:
    """The text of a user's file, with its line ends made ``\\n``.

    Args:
        path: The file.

    Returns:
        The decoded text (a byte-order mark removed; ``\\r\\n`` and a lone ``\\r`` become
        ``\\n``).

    Raises:
        UsageError: The path is not a readable file, or its bytes are not UTF-8 or UTF-16
            (with a byte-order mark) text; the message names what they are.
    """
    if path.is_dir():
        raise UsageError(f"{path}: is a directory, not a file")
    try:
        mode = path.stat().st_mode
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    if not stat.S_ISREG(mode):
        # a FIFO or a device would block or never end: not a file someone wrote a table into
        raise UsageError(f"{path}: not a regular file (a pipe, a device or a socket)")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return decode(path, raw)


def decode(path: Path, raw: bytes) -> str:
    """Decode a file's bytes as :func:`read_text` does (``path`` only names it in errors).

    Raises:
        UsageError: See :func:`read_text`.
    """
    # UTF-32's marks start with UTF-16's: test them first.
    if raw.startswith(_UTF32):
        raise UsageError(f"{path}: UTF-32 text, which is not read; save it as UTF-8")
    for bom, codec in _UTF16:
        if raw.startswith(bom):
            try:
                return _lines(raw[len(bom) :].decode(codec))
            except UnicodeDecodeError as exc:
                raise UsageError(
                    f"{path}: starts as UTF-16 text but byte {exc.start + len(bom)} is not "
                    "UTF-16; save it as UTF-8"
                ) from exc
    raw = raw.removeprefix(codecs.BOM_UTF8)
    for magic, what in _MAGIC:
        if raw.startswith(magic):
            raise UsageError(f"{path}: {what}")
    if b"\x00" in raw:
        raise UsageError(f"{path}: {_nul_kind(raw)}")
    try:
        return _lines(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: {_not_utf8(raw, exc)}") from exc


def _lines(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _nul_kind(raw: bytes) -> str:
    """What a file holding NUL bytes is: UTF-16 without its mark, or binary."""
    head = raw[:4096]
    even, odd = head[0::2], head[1::2]
    # ASCII text in UTF-16 has a NUL in every other byte.
    if odd and odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
        return "UTF-16 (little-endian) text without a byte-order mark; save it as UTF-8"
    if even and even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
        return "UTF-16 (big-endian) text without a byte-order mark; save it as UTF-8"
    return "a binary file, not CSV or markdown text"


def _not_utf8(raw: bytes, exc: UnicodeDecodeError) -> str:
    """Name the encoding of bytes that are not UTF-8 (a legacy 8-bit code page, as a rule)."""
    line = raw.count(b"\n", 0, exc.start) + 1
    byte = raw[exc.start]
    try:
        raw.decode("cp1252")
        guess = "Latin-1 / Windows-1252"
    except UnicodeDecodeError:
        guess = "Latin-1 (ISO-8859-1)"
    shown = raw[exc.start : exc.start + 1].decode("cp1252" if "Windows" in guess else "latin-1")
    return (
        f"not UTF-8 text but {guess}, by the look of it (byte 0x{byte:02x} on line {line} "
        f"reads {shown!r} there); save the file as UTF-8"
    )
