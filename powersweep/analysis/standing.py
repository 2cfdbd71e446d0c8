"""Which rows of a point stand: a point measured again replaces its earlier try, except the
confirm phase's re-measurements and the run's reference read again (``REPEAT_REASONS``), which
are pooled with the reading they repeat. The analysis
(:mod:`.pooling`) and the plausibility checks (:mod:`.plausibility`) read a point alike."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from powersweep.runformat import REPEAT_REASONS


def current_rows(caps: pl.DataFrame, by: Sequence[str] = ("cap_w",)) -> pl.DataFrame:
    """The rows of each point that stand: its last measurement that is not a confirm
    re-measurement, with the confirm rows after it; a point whose last such measurement did not
    end ok (a recheck found it suspect, a retry failed) has none: an earlier reading it replaced
    must not stand in for it."""
    keys = [c for c in by if c in caps.columns]
    if caps.height == 0 or not keys or "status" not in caps.columns:
        return caps
    confirm = (
        pl.col("reason").fill_null("").is_in(list(REPEAT_REASONS))
        if "reason" in caps.columns
        else pl.lit(False)
    )
    last_status = (
        pl.col("status").filter(~confirm).last().over(keys)
        if "reason" in caps.columns
        else pl.col("status").last().over(keys)
    )
    return caps.filter(last_status.fill_null("ok") == "ok")


def pooled_rows(ok: pl.DataFrame, keys: Sequence[str]) -> pl.DataFrame:
    """Of a point's usable rows, the ones pooled into its reading: its last measurement before
    the confirm phase and its repeats (``reason`` ``confirm`` or ``reread``)."""
    if "reason" not in ok.columns or ok.height == 0:
        return ok
    confirm = pl.col("reason").fill_null("").is_in(list(REPEAT_REASONS))
    return (
        ok.with_row_index("_i")
        .filter(confirm | (pl.col("_i") == pl.col("_i").filter(~confirm).max().over(keys)))
        .drop("_i")
    )
