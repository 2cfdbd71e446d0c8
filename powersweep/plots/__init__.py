"""Charts of a sweep, drawn only from its typed analysis (and, for the timeline, its samples).

Matplotlib is used through its object API on the Agg canvas, with a fixed style applied locally,
so output is byte-identical for identical inputs and global state is never touched.
"""

from powersweep.plots.clock_charts import (
    efficiency_by_clock_figure,
    pareto_figure,
    render_clock_charts,
)
from powersweep.plots.companions import clocks_figure, power_figure, timeline_figure
from powersweep.plots.compare_charts import (
    compare_figure,
    compare_labels,
    compare_table,
    render_compare,
)
from powersweep.plots.efficiency import efficiency_figure
from powersweep.plots.latency import has_latency, latency_figure, render_latency_chart
from powersweep.plots.render import render_charts

__all__ = [
    "clocks_figure",
    "compare_figure",
    "compare_labels",
    "compare_table",
    "efficiency_by_clock_figure",
    "efficiency_figure",
    "has_latency",
    "latency_figure",
    "pareto_figure",
    "power_figure",
    "render_charts",
    "render_clock_charts",
    "render_compare",
    "render_latency_chart",
    "timeline_figure",
]
