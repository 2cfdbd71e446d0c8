"""powersweep.analysis.textfile: a user's file read as UTF-8 or marked UTF-16 with ``\\n`` line
ends, and every other kind of bytes refused with one error naming what they are."""

from __future__ import annotations

import codecs
import os
from pathlib import Path

import pytest

from powersweep.analysis.textfile import decode, read_text
from powersweep.errors import UsageError

P = Path("t.csv")


def test_utf8_with_or_without_its_mark_and_every_line_end() -> None:
    assert decode(P, "cap_w,°C\r\n1,2\r3\n".encode()) == "cap_w,°C\n1,2\n3\n"
    assert decode(P, codecs.BOM_UTF8 + b"a\r\nb") == "a\nb"
    assert decode(P, b"") == ""


@pytest.mark.parametrize(
    ("bom", "codec"), [(codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be")]
)
def test_utf16_with_its_mark_is_read(bom: bytes, codec: str) -> None:
    assert decode(P, bom + "cap_w\t°C\r\n1\t2".encode(codec)) == "cap_w\t°C\n1\t2"


def test_utf16_with_a_broken_surrogate_names_the_byte() -> None:
    raw = codecs.BOM_UTF16_LE + "ab".encode("utf-16-le") + b"\x00\xd8"  # a lone high surrogate
    with pytest.raises(
        UsageError, match=r"^t\.csv: starts as UTF-16 text but byte 6 is not UTF-16"
    ):
        decode(P, raw)


def test_utf32_is_refused_before_its_utf16_look_alike() -> None:
    with pytest.raises(UsageError, match="UTF-32 text, which is not read; save it as UTF-8"):
        decode(P, codecs.BOM_UTF32_LE + "a".encode("utf-32-le"))


@pytest.mark.parametrize(
    ("raw", "what"),
    [
        (b"PK\x03\x04rest", "a zip archive (an Excel .xlsx or ODS workbook?)"),
        (b"\xd0\xcf\x11\xe0rest", "an old Excel .xls workbook"),
        (b"\x1f\x8b\x08", "a gzip archive; unpack it first"),
        (b"\x89PNG\r\n", "a PNG image, not a table"),
        (b"\xff\xd8\xff\xe0", "a JPEG image, not a table"),
        (b"%PDF-1.7", "a PDF document, not a table"),
        (b"SQLite format 3\x00", "an SQLite database, not a table"),
        (codecs.BOM_UTF8 + b"%PDF-1.4", "a PDF document"),  # a mark before the magic
    ],
)
def test_binary_files_are_named(raw: bytes, what: str) -> None:
    with pytest.raises(UsageError) as exc:
        decode(P, raw)
    assert str(exc.value).startswith(f"t.csv: {what}")


def test_nul_bytes_tell_unmarked_utf16_from_binary() -> None:
    with pytest.raises(UsageError, match=r"UTF-16 \(little-endian\) text without a byte-order"):
        decode(P, "cap_w,power_w\n".encode("utf-16-le"))
    with pytest.raises(UsageError, match=r"UTF-16 \(big-endian\) text without a byte-order"):
        decode(P, "cap_w,power_w\n".encode("utf-16-be"))
    with pytest.raises(UsageError, match="a binary file, not CSV or markdown text"):
        decode(P, b"\x01\x00\x00\x07\x00\x00\x00abc")


def test_a_legacy_code_page_is_named_with_the_line_and_byte() -> None:
    with pytest.raises(UsageError) as exc:
        decode(P, b"cap_w,temp\n300,72\xb0C\n")
    assert str(exc.value) == (
        "t.csv: not UTF-8 text but Latin-1 / Windows-1252, by the look of it (byte 0xb0 on "
        "line 2 reads '°' there); save the file as UTF-8"
    )
    # 0x81 is undefined in Windows-1252: plain Latin-1
    with pytest.raises(
        UsageError, match=r"but Latin-1 \(ISO-8859-1\), by the look of it \(byte 0x81 on line 1"
    ):
        decode(P, b"a\x81b\n")


def test_read_text_reads_a_file_and_refuses_what_is_not_one(tmp_path: Path) -> None:
    path = tmp_path / "caps.csv"
    path.write_bytes(b"cap_w\r\n300\r\n")
    assert read_text(path) == "cap_w\n300\n"
    with pytest.raises(UsageError, match="is a directory, not a file"):
        read_text(tmp_path)
    with pytest.raises(UsageError, match=r"cannot read: No such file or directory"):
        read_text(tmp_path / "missing.csv")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs a FIFO")
def test_a_pipe_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(UsageError, match=r"not a regular file \(a pipe, a device or a socket\)"):
        read_text(fifo)
