"""A saved ``analysis.json`` read into its axis's typed record, by the ``kind`` it names."""

from __future__ import annotations

from powersweep.analysis.clock_result_types import ClockAnalysis
from powersweep.analysis.result_types import PowerAnalysis
from powersweep.analysis.undervolt_result_types import UndervoltAnalysis
from powersweep.errors import UsageError
from powersweep.runformat import JsonMap

# A power curve's analysis names no kind; this is the kind it is.
POWER = "power"

# An analysis of any axis, as analysis.json holds it.
SavedAnalysis = PowerAnalysis | ClockAnalysis | UndervoltAnalysis

_BY_KIND: dict[str, type[ClockAnalysis] | type[UndervoltAnalysis]] = {
    "clocks": ClockAnalysis,
    "undervolt": UndervoltAnalysis,
}


def typed_analysis(doc: JsonMap) -> SavedAnalysis:
    """The typed analysis of a saved ``analysis.json`` (a power curve's has no ``kind``).

    Raises:
        UsageError: A kind this version does not know, or a key of the wrong type (named).
    """
    kind = doc.get("kind")
    if kind in (None, POWER):
        return PowerAnalysis.from_json(doc)
    record = _BY_KIND.get(kind) if isinstance(kind, str) else None
    if record is None:
        raise UsageError(f"analysis.json is of an unknown kind {kind!r}: analyze the run again")
    return record.from_json(doc)


def kind_of(analysis: SavedAnalysis) -> str:
    """``power``, ``clocks`` or ``undervolt``."""
    return POWER if isinstance(analysis, PowerAnalysis) else analysis.kind
