"""The share of a run's decode time that short stalls took, and each point stated at it.

The reasoning: docs/reference.md, "powersweep.sweep.measurement.stalls".
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from powersweep.runformat import as_float
from powersweep.sweep.sampling.consistency import DECODE_KINDS, is_stall

# Prompt kinds whose requests decode a stream (the warm-up's too): the run's decode time.
STREAM_KINDS = DECODE_KINDS | {"warmup"}
# The rate columns stated at the run's stall share: (column, the kind whose share it carries,
# whether it is a time or energy per token, which the share divides).
STATED = (
    ("narr_tps", "narr", False),
    ("code_tps", "code", False),
    ("tps_per_w", "narr", False),
    ("j_per_token", "narr", True),
    ("j_per_token_sampled", "narr", True),
    ("kwh_per_mtok", "narr", True),
)


@dataclass(frozen=True)
class RunStalls:
    """The run's stall share of its streams' decode time, with its standard error.

    Attributes:
        share: Stalled seconds over decode seconds, all the run's decode requests together.
        sd: Its standard error (the ratio estimator's, requests as the units).
        requests: The requests it counts.
    """

    share: float = 0.0
    sd: float = 0.0
    requests: int = 0

    @classmethod
    def of(cls, rows: Iterable[Mapping[str, Any]]) -> RunStalls:
        """From requests.csv rows: every ok decode request that recorded ``stall_s``, less those
        whose stall the point's consistency check judged a disturbance (measured again)."""
        units = []
        for row in rows:
            stalled, span = as_float(row.get("stall_s")), _span_s(row)
            ok = str(row.get("ok")).lower() == "true"
            if not (ok and row.get("prompt_kind") in STREAM_KINDS and span > 0):
                continue
            if math.isfinite(stalled) and not is_stall(stalled, span):
                units.append((stalled, span))
        n = len(units)
        total = math.fsum(d for _, d in units)
        if n < 2 or not total > 0:
            return cls(requests=n)
        share = math.fsum(s for s, _ in units) / total
        var = n / (n - 1) * math.fsum((s - share * d) ** 2 for s, d in units) / total**2
        return cls(share, math.sqrt(var), n)

    @property
    def sd_rel(self) -> float:
        """The standard error of the run's working share (1 less the stall share), relative."""
        return self.sd / (1.0 - self.share) if self.share < 1.0 else math.inf

    def stated(self, row: Mapping[str, Any]) -> dict[str, float]:
        """A decode-single row's rate columns stated at the run's share (``stall_run_pct``) in
        place of the share its own windows met (or the share it was stated at before); empty for
        a row without stall shares (other modes, runs before the columns)."""
        before = as_float(row.get("stall_run_pct")) / 100.0
        out: dict[str, float] = {}
        for column, kind, per_token in STATED:
            own = as_float(row.get(f"{kind}_stall_pct")) / 100.0
            own = before if math.isfinite(before) else own
            value = as_float(row.get(column))
            if not (math.isfinite(own) and math.isfinite(value)):
                continue
            factor = (1.0 - self.share) / (1.0 - own)
            out[column] = value / factor if per_token else value * factor
        if out:
            out["stall_run_pct"] = 100.0 * self.share
        return out

    def note(self) -> str:
        """What the user reads of a run whose streams stalled."""
        return (
            f"the server's token streams stalled for {100 * self.share:.2g}% "
            f"(±{196 * self.sd:.2g}%) of their decode time (another tenant or the host): "
            "the rates are stated at that share, whether or not a point's own windows met a stall"
        )

    def to_dict(self) -> dict[str, Any]:
        """``run.json`` ``stalls``."""
        return {
            "share_pct": round(100.0 * self.share, 4),
            "sd_pct": round(100.0 * self.sd, 4),
            "requests": self.requests,
        }


def _span_s(row: Mapping[str, Any]) -> float:
    return as_float(row.get("t_last_token_s")) - as_float(row.get("t_first_token_s"))
