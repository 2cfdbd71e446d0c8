"""The corpus of published curves (tests/data/published): its manifest parses and names every CSV,
each curve carries its provenance and the source's reading, its draw kind matches its `power_w`
column, and the loader reads every curve that has a draw. The analysis is judged against these
curves elsewhere; this file checks only that the corpus itself is sound."""

from __future__ import annotations

import csv
import math
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.load import load_curve
from powersweep.errors import UsageError
from powersweep.runformat import CAPS_COLUMNS, CLOCK_LOCK_COLUMNS
from tests.paths import PUBLISHED

MANIFEST = PUBLISHED / "corpus.toml"

REQUIRED = (
    "id",
    "file",
    "source_url",
    "source_kind",
    "source_group",
    "title",
    "location",
    "retrieved",
    "gpu",
    "n_gpus",
    "cooling",
    "engine",
    "model",
    "load_mode",
    "axis",
    "draw",
    "transcription",
    "quote",
    "notes",
)
CHOICES = {
    "source_kind": {
        "github-issue",
        "github-discussion",
        "repo-file",
        "paper-table",
        "blog",
        "forum",
    },
    "cooling": {"air", "water", "unknown"},
    "load_mode": {"decode-single", "decode-concurrent", "prefill-heavy", "batch", "other"},
    "axis": {"power", "sm-clock", "mem-clock", "grid"},
    "draw": {"measured", "derived", "cap-assumed", "none"},
    "transcription": {"table", "text", "chart-read"},
}
READING_KEYS = {
    "best_tps_per_w_at",
    "best_mem_lock_mhz",
    "plateaus",
    "ceiling_from",
    "flat",
    "other",
}
# the draw kinds whose curve has a power_w value; the others must leave it empty
WITH_DRAW = {"measured", "derived"}
TPS_COLUMNS = ("narr_tps", "prefill_tps")
LOCK_COLUMNS = {"sm-clock": ("sm_lock_mhz",), "mem-clock": ("mem_lock_mhz",)}


def _curves() -> list[dict[str, Any]]:
    with MANIFEST.open("rb") as fh:
        curves = tomllib.load(fh)["curve"]
    assert isinstance(curves, list)
    return curves


def _rows(curve: dict[str, Any]) -> tuple[list[str], list[dict[str, str]]]:
    with (PUBLISHED / curve["file"]).open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def _numbers(rows: list[dict[str, str]], column: str) -> Iterator[float | None]:
    """A column's cells as numbers; an empty or absent cell is None."""
    for row in rows:
        cell = (row.get(column) or "").strip()
        yield float(cell) if cell else None


def _positive(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


CURVES = _curves()
IDS = [c.get("id", "?") for c in CURVES]


def test_ids_and_files_are_unique_and_every_csv_is_listed() -> None:
    assert len(set(IDS)) == len(IDS)
    files = [c["file"] for c in CURVES]
    assert len(set(files)) == len(files)
    assert {p.name for p in PUBLISHED.glob("*.csv")} == set(files)


def test_the_corpus_reaches_its_size() -> None:
    # issue 44: at least 20 curves from at least 8 independent sources
    assert len(CURVES) >= 20
    assert len({c["source_group"] for c in CURVES}) >= 8
    # and the analysis needs a draw: the goal holds counting only curves whose draw was measured
    # or derived (a source without one cannot give TPS/W, so it does not count)
    with_draw = [c for c in CURVES if c["draw"] in WITH_DRAW]
    assert len(with_draw) >= 20
    assert len({c["source_group"] for c in with_draw}) >= 8


def test_the_readme_lists_every_curve_with_its_source() -> None:
    readme = (PUBLISHED / "README.md").read_text(encoding="utf-8")
    for curve in CURVES:
        row = next((ln for ln in readme.splitlines() if ln.startswith(f"| {curve['id']} |")), None)
        assert row is not None, curve["id"]
        assert f"({curve['source_url']})" in row, curve["id"]


@pytest.mark.parametrize("curve", CURVES, ids=IDS)
def test_manifest_entry_is_complete(curve: dict[str, Any]) -> None:
    missing = [k for k in REQUIRED if k not in curve]
    assert not missing, missing
    for key, allowed in CHOICES.items():
        assert curve[key] in allowed, (key, curve[key])
    assert curve["id"] == Path(curve["file"]).stem
    assert curve["source_url"].startswith("https://")
    assert isinstance(curve["n_gpus"], int) and curve["n_gpus"] >= 1
    for key in REQUIRED:
        if isinstance(curve[key], str):
            assert curve[key].strip(), key
    for key in ("default_limit_w", "min_limit_w", "max_limit_w"):
        if key in curve:
            assert curve[key] > 0, key
    reading = curve.get("reading")
    assert isinstance(reading, dict) and reading, "the source's reading is missing"
    assert set(reading) <= READING_KEYS, set(reading) - READING_KEYS
    for lo, hi in reading.get("plateaus", []):
        assert lo < hi


@pytest.mark.parametrize("curve", CURVES, ids=IDS)
def test_csv_matches_its_manifest_entry(curve: dict[str, Any]) -> None:
    header, rows = _rows(curve)
    assert set(header) <= set(CAPS_COLUMNS), set(header) - set(CAPS_COLUMNS)
    assert "cap_w" in header and "power_w" in header
    assert any(c in header for c in TPS_COLUMNS)

    # at least three settings with a finite positive TPS
    with_tps = [r for r in rows if any(_positive(v) for c in TPS_COLUMNS for v in _numbers([r], c))]
    assert len(with_tps) >= 3

    # the draw kind says whether power_w holds values
    power = [v for v in _numbers(rows, "power_w") if v is not None]
    if curve["draw"] in WITH_DRAW:
        assert power and all(_positive(v) for v in power)
    else:
        assert not power

    # n_gpus: the column when the curve spans several cards, the same on every row
    gpus = set(_numbers(rows, "n_gpus"))
    assert gpus <= {float(curve["n_gpus"])} | ({None} if curve["n_gpus"] == 1 else set())
    if curve["n_gpus"] > 1:
        assert gpus == {float(curve["n_gpus"])}

    # the axis decides the key of each row: a cap, or the locks
    if curve["axis"] == "power":
        assert not set(CLOCK_LOCK_COLUMNS) & set(header)
        assert all(_positive(c) for c in _numbers(rows, "cap_w"))
    else:
        locks = LOCK_COLUMNS.get(curve["axis"], CLOCK_LOCK_COLUMNS)
        assert set(locks) <= set(header)
        assert all(_positive(v) for c in locks for v in _numbers(rows, c))


@pytest.mark.parametrize("curve", CURVES, ids=IDS)
def test_the_loader_reads_every_curve_with_a_draw(curve: dict[str, Any]) -> None:
    path = PUBLISHED / curve["file"]
    _, rows = _rows(curve)
    if curve["draw"] in WITH_DRAW:
        loaded = load_curve(path)
        assert loaded.caps.height == len(rows)
        expected = "narr_tps" if any(map(_positive, _numbers(rows, "narr_tps"))) else "prefill_tps"
        assert loaded.metric == expected
        assert not loaded.notes
    else:
        # a curve that printed no draw cannot give TPS/W; today's loader says so plainly
        with pytest.raises(UsageError, match="nothing to analyse"):
            load_curve(path)
