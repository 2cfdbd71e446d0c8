"""Analysis of power-cap curves: sweet spot, recommendations, plateaus, regimes, findings.

Reads CSVs only (``caps.csv`` and, when present, ``run.json``, ``samples.csv``, ``requests.csv``);
never imports :mod:`powersweep.sweep`.
"""

from powersweep.analysis.clock_analysis import analyze_clocks
from powersweep.analysis.core import analyze
from powersweep.analysis.cross import cross_mode
from powersweep.analysis.importer import import_run, import_summary
from powersweep.analysis.load import Curve, load_curve, write_caps_csv
from powersweep.analysis.objectives import OBJECTIVES
from powersweep.analysis.summary import escape_md, render_summary, write_outputs

__all__ = [
    "OBJECTIVES",
    "Curve",
    "analyze",
    "analyze_clocks",
    "cross_mode",
    "escape_md",
    "import_run",
    "import_summary",
    "load_curve",
    "render_summary",
    "write_caps_csv",
    "write_outputs",
]
