"""Reading and writing the small files the tests check or hand the tool."""

from __future__ import annotations

import csv
from pathlib import Path


def read_csv(path: Path) -> list[dict[str, str]]:
    """A CSV file's rows, by its header's names."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def write_text(folder: Path, text: str, name: str = "caps.csv") -> Path:
    """``text`` written (UTF-8) to ``folder / name``; its path."""
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def number_or_nan(value: str) -> float:
    """A CSV cell's number; an empty cell is NaN."""
    return float(value) if value else float("nan")
