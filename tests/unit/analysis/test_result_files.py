"""Writing an analysis (analysis/result_files.py): both files whole, any axis, one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_files import write_analysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.errors import PowersweepError

DOC = {"schema_version": 1, "metric": "narr_tps", "sweet_spot": {"cap_w": 250.0, "tps": 1.5}}


def test_both_files_are_written_whole_and_nothing_else_is_left(tmp_path: Path) -> None:
    analysis = PowerAnalysis.from_json(DOC)
    paths = write_analysis(analysis, "# summary\n", tmp_path / "new" / "run")
    assert [p.name for p in paths] == ["analysis.json", "summary.md"]
    written = json.loads(paths[0].read_text())
    assert written == analysis.to_json() and written["sweet_spot"] == DOC["sweet_spot"]
    assert paths[0].read_text().endswith("}\n") and paths[1].read_text() == "# summary\n"
    assert sorted(p.name for p in paths[0].parent.iterdir()) == ["analysis.json", "summary.md"]


def test_a_clock_analysis_is_written_by_the_same_writer(tmp_path: Path) -> None:
    doc = {"kind": "clocks", "axis": "grid", "peak": {"sm_lock_mhz": 1500.0}}
    (json_path, _) = write_analysis(ClockAnalysis.from_json(doc), "clocks\n", tmp_path)
    written = json.loads(json_path.read_text())
    assert written["peak"] == doc["peak"] and written["axis"] == "grid"


def test_a_place_that_cannot_be_written_is_one_error_naming_it(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PowersweepError, match=r"cannot write the analysis into .*file/sub"):
        write_analysis(PowerAnalysis.from_json(DOC), "x", blocker / "sub")


def test_a_nan_left_in_the_analysis_is_refused_and_no_file_is_half_written(
    tmp_path: Path,
) -> None:
    bad = PowerAnalysis.from_json({"sweet_spot": {"cap_w": math.nan}})
    with pytest.raises(PowersweepError, match=r"cannot write analysis\.json"):
        write_analysis(bad, "x", tmp_path)
    assert list(tmp_path.iterdir()) == []
