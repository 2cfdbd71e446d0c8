"""A finding: one thing the analysis tells the user (a warning or a fact), typed once.

``analysis.json`` keeps findings as ``{severity, code, message, hint}`` objects; every module of
the analysis builds them as :class:`Finding` through :func:`finding`, the analysis writes each
with :meth:`Finding.to_json`, and a reader turns one back with :meth:`Finding.from_json`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from powersweep.runformat import JsonMap, JsonObject


class Severity(StrEnum):
    """How much a finding matters: ``warning`` (a figure to doubt or an action to take) or
    ``info`` (what the curve shows)."""

    WARNING = "warning"
    INFO = "info"

    @classmethod
    def _missing_(cls, value: object) -> Severity:
        """An unknown severity (a hand-edited or newer file) reads as ``info``."""
        return cls.INFO


@dataclass(frozen=True)
class Finding:
    """One finding.

    Attributes:
        severity: ``warning`` or ``info``.
        code: A stable short name (``sweet_spot``, ``no_cap_binds``...), for tools.
        message: The finding in words, one paragraph.
        hint: What to do about it (None: nothing to do).
    """

    severity: Severity
    code: str
    message: str
    hint: str | None = None

    def to_json(self) -> JsonObject:
        """The finding as ``analysis.json`` holds it."""
        return {
            "severity": str(self.severity),
            "code": self.code,
            "message": self.message,
            "hint": self.hint,
        }

    @classmethod
    def from_json(cls, data: JsonMap) -> Finding:
        """A finding from ``analysis.json`` (an unknown severity reads as ``info``)."""
        severity = Severity(str(data.get("severity")))
        hint = data.get("hint")
        return cls(
            severity,
            str(data.get("code") or ""),
            str(data.get("message") or ""),
            str(hint) if hint is not None else None,
        )


def finding(severity: str, code: str, message: str, hint: str | None = None) -> Finding:
    """A finding (``severity`` is ``warning`` or ``info``).

    Raises:
        ValueError: An unknown severity (a programming error).
    """
    if severity not in Severity._value2member_map_:
        raise ValueError(f"unknown severity {severity!r}")
    return Finding(Severity(severity), code, message, hint)
