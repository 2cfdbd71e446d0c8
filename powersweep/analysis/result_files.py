"""Writing an analysis: ``analysis.json`` and ``summary.md``, each whole or not at all.

Every axis writes through :func:`write_analysis`, so a run directory never holds half a file,
whichever summary the axis rendered.
"""

from __future__ import annotations

import json
from pathlib import Path

from powersweep.analysis.result_types import JsonRecord
from powersweep.errors import PowersweepError
from powersweep.safe_files import write_atomic


def analysis_text(analysis: JsonRecord) -> str:
    """The typed analysis as ``analysis.json`` holds it (what ``--json`` prints).

    Raises:
        ValueError: A NaN was left in it (a bug).
    """
    return json.dumps(analysis.to_json(), indent=2, allow_nan=False) + "\n"


def write_analysis(analysis: JsonRecord, summary: str, out_dir: Path) -> list[Path]:
    """Write ``analysis.json`` (the typed analysis, any axis) and ``summary.md`` into
    ``out_dir``, each whole or not at all.

    Returns:
        The paths written.

    Raises:
        PowersweepError: A file cannot be written.
    """
    out_dir = Path(out_dir)
    json_path = out_dir / "analysis.json"
    md_path = out_dir / "summary.md"
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_atomic(json_path, analysis_text(analysis), sync=False)
        write_atomic(md_path, summary, sync=False)
    except OSError as exc:
        raise PowersweepError(
            f"cannot write the analysis into {out_dir}: {exc.strerror or exc}"
        ) from exc
    except ValueError as exc:  # NaN left in the analysis: a bug, but say so in one line
        raise PowersweepError(f"cannot write analysis.json: {exc}") from exc
    return [json_path, md_path]
