"""The confirm phase (``sweep/measurement/confirm_phase.py``) on fake cards and a fake load.

The phase reads the analysis of the run so far; here the analysis is scripted (a subclass
answers :meth:`ConfirmPhase._analysis`), so what is tested is the phase itself: the card kept
warm at the best while the analysis runs, the planned points measured by the protocol (the
metric's prompt only), the stop once the rest is separated, the bound, the record.
"""

from __future__ import annotations

from typing import Any

from powersweep.analysis.result_types import PowerAnalysis
from powersweep.runformat import CONFIRM_REASON
from powersweep.sweep.axes import AXES
from powersweep.sweep.measurement.confirm_phase import ConfirmPhase
from powersweep.sweep.planning.confirm_plan import CONFIRM_MAX_CAPS, NOTHING_TIED
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.sampling.windows import WindowPolicy
from tests.fakes.fake_bench import Bench

CAPS = (300.0, 290.0, 280.0, 270.0)
# TPS/W as the analysis so far read it: 290 W the best, every cap within noise of it
TPW = {300.0: 0.1101, 290.0: 0.1112, 280.0: 0.1110, 270.0: 0.1105}


def analysis(tied: list[float], best: float = 290.0) -> dict[str, Any]:
    """A power sweep's analysis (the part the confirm phase reads)."""
    return {
        "sweet_spot": {
            "cap_w": best,
            "tied_caps": tied,
            "interval_w": [min(tied), max(tied)],
            "noise_source": "resampled",
        },
        "caps": [{"cap_w": c, "tps_per_w": v, "status": "ok"} for c, v in TPW.items()],
    }


class ScriptedConfirm(ConfirmPhase):
    """The confirm phase with its analyses scripted, in order (the last one repeats); each
    records what the card was doing while it ran."""

    def __init__(self, bench: Bench, analyses: list[dict[str, Any]]) -> None:
        self.meta: dict[str, Any] = {}
        super().__init__(
            bench.measurer,
            bench.writer,  # type: ignore[arg-type]
            self.meta,
            [SweepPoint(c) for c in CAPS],
            warn=bench.warnings.append,
        )
        self.axis = AXES["power"]  # what analysing the bench's curve would find
        self.bench = bench
        self.script = list(analyses)
        self.asked: list[tuple[str, float, bool]] = []
        # whether the load still kept the card busy once the phase was over
        self.busy_after: bool | None = None

    def _analysis(self, when: str) -> PowerAnalysis | None:
        busy = self.bench.load.busy_in_flight()
        self.asked.append((when, self.bench.gpus[0].limit_w, busy))
        scripted = self.script.pop(0) if len(self.script) > 1 else self.script[0]
        return PowerAnalysis.from_json(scripted) if scripted else None  # {}: nothing analysed


def confirm(analyses: list[dict[str, Any]]) -> tuple[Bench, ScriptedConfirm]:
    """A dense pass over :data:`CAPS`, then the confirm phase from its best (290 W)."""
    bench = Bench(windows=WindowPolicy(min_s=3.0, max_s=10.0))
    phase = ScriptedConfirm(bench, analyses)

    async def work() -> None:
        for i, cap in enumerate(CAPS):
            await bench.measurer.measure(SweepPoint(cap), "dense", i, len(CAPS))
        # the phase itself keeps the card warm (not the load the last point left running)
        await bench.measurer.stop_busy()
        await phase.run(SweepPoint(290.0))
        phase.busy_after = bench.load.busy_in_flight()

    bench.run(work)
    return bench, phase


def confirmed(bench: Bench) -> list[float]:
    """The caps measured again (each first round of a confirm measurement)."""
    return [r["cap_w"] for r in bench.writer.caps if r["reason"] == CONFIRM_REASON]


def test_nothing_tied_measures_nothing_and_says_why() -> None:
    bench, phase = confirm([analysis([290.0])])
    assert confirmed(bench) == []
    assert len(bench.load.calls) == len(CAPS)
    assert phase.meta["confirm"]["skipped"] == NOTHING_TIED
    assert bench.writer.run_json[-1]["confirm"]["skipped"] == NOTHING_TIED


def test_the_card_is_kept_warm_at_the_best_while_the_analysis_runs() -> None:
    _, phase = confirm([analysis([270.0, 280.0, 290.0, 300.0]), analysis([290.0])])
    # the best point set, and the load running on (on the virtual loop, the analysis runs
    # inline, before the load's task had a turn: it is in flight, not yet started)
    assert phase.asked[0] == ("so far", 290.0, True)
    # and nothing keeps it busy once the phase is over
    assert phase.busy_after is False


def test_the_phase_stops_once_the_rest_is_separated() -> None:
    # the two best tied caps are planned (290, 280); 290 measured again separates 280
    bench, phase = confirm([analysis([270.0, 280.0, 290.0, 300.0]), analysis([290.0])])
    assert confirmed(bench) == [290.0]
    assert [w for w, _, _ in phase.asked] == ["so far", "pooled"]
    record = phase.meta["confirm"]
    assert record["caps_w"] == [290.0, 280.0]
    assert record["stopped"] == "separated after 1 of 2"
    assert (record["best_after_w"], record["tied_after"]) == (290.0, [290.0])
    assert bench.writer.run_json[-1]["confirm"] == record
    # re-measured by the protocol, the metric's prompt only
    assert all(c.metric_only for c in bench.load.calls[len(CAPS) :])


def test_points_still_tied_are_each_measured_once_and_no_more_than_planned() -> None:
    every = analysis(list(CAPS))
    bench, phase = confirm([every])
    assert confirmed(bench) == [290.0, 280.0]
    assert len(confirmed(bench)) == CONFIRM_MAX_CAPS
    assert "stopped" not in phase.meta["confirm"]
    assert [w for w, _, _ in phase.asked] == ["so far", "pooled", "pooled"]
