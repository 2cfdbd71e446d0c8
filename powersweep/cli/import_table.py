"""``powersweep import``: a pasted power-cap table becomes a run folder (caps.csv, and run.json
with what the paste's header says: GPU, load mode, and a summary's cooling, model and date)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from powersweep.cli._common import Handover, warn
from powersweep.cli.help_layout import option
from powersweep.errors import UsageError

# `import --help`'s last lines
EXAMPLES = """Examples:
  powersweep import pasted.md --out imported
  powersweep analyze imported"""

# run.json's keys an import fills, as a user would name them
_FACT_WORDS = {
    "gpus": "GPU",
    "load_mode": "load mode",
    "cooling": "cooling",
    "server": "model / engine",
    "started_at": "date",
}


def import_command(
    summary: Annotated[
        Path, typer.Argument(metavar="FILE", help="Markdown with a power-cap summary table.")
    ],
    out: Annotated[
        Path | None,
        option(
            metavar="DIR",
            help="Run folder to write (default: FILE-imported).",
            doc="Folder for caps.csv and run.json (default: <summary>-imported beside it), or "
            "a .csv file (run.json goes beside one named caps.csv).",
        ),
    ] = None,
) -> None:
    """Turn a pasted power-cap table into a run folder.

    The table is power-cap-sweep.sh's or a powersweep summary.md's; what its header says (GPU,
    load mode, cooling, model, date) goes into the folder's run.json.
    """
    from powersweep import analysis
    from powersweep.sweep.records.writer import write_json_atomic

    df, meta = analysis.import_run(summary)
    if out is None:
        out = summary.with_name(f"{summary.stem}-imported")
    folder = out.suffix.lower() != ".csv"
    target = out / "caps.csv" if folder else out
    facts = [word for key, word in _FACT_WORDS.items() if key in meta]
    keep_meta = target.name == "caps.csv"
    if facts and not keep_meta:
        warn(
            f"{target} has no run.json beside it to hold what the header says ("
            + ", ".join(facts)
            + "): give --out DIR (or DIR/caps.csv) to keep it"
        )
    _refuse_a_sweeps_record(target.parent / "run.json" if keep_meta else None)
    handover = Handover()
    handover.expect(target.parent)
    written: list[Path] = []
    try:
        analysis.write_caps_csv(df, target)
        written.append(target)
        if keep_meta:
            write_json_atomic(target.parent / "run.json", meta)
            written.append(target.parent / "run.json")
    finally:
        handover.hand(written)
    typer.echo(str(out))


def _refuse_a_sweeps_record(run_json: Path | None) -> None:
    """Refuse to replace a run.json that a sweep wrote (one without ``imported_from``): an
    import into a run's folder would overwrite what the sweep measured.

    Raises:
        UsageError: It is one, with what to do instead.
    """
    import json

    if run_json is None or not run_json.is_file():
        return
    try:
        recorded = json.loads(run_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        recorded = None
    if not (isinstance(recorded, dict) and "imported_from" in recorded):
        raise UsageError(f"{run_json} is a sweep's own record, not an import's: give another --out")
