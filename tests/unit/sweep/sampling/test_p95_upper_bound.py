"""The p95's upper confidence bound without scipy.stats: SciPy's figure, without its import.

Importing ``scipy.stats`` to bound a p95 cost a sweep process about two CPU seconds (a large share
of a whole decode-concurrent sweep's CPU); the order statistic is now found from the binomial
tail directly; every quantile's interval, both ends, the same way.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from powersweep.sweep.sampling.per_token import p95_upper_ms, quantile_interval


@pytest.mark.parametrize("n", [2, 50, 71, 72, 73, 100, 137, 1000, 4321, 60000])
def test_the_bound_is_scipys(n: int) -> None:
    rng = np.random.default_rng(n)
    values = list(rng.lognormal(3.0, 0.5, size=n))
    q = float(np.percentile(values, 95))
    high = float(stats.quantile_test(values, q=q, p=0.95).confidence_interval(0.95).high)
    ours = p95_upper_ms(values)
    if math.isnan(high):
        assert math.isnan(ours)
    else:
        assert ours == high


@pytest.mark.parametrize("n", [2, 10, 30, 73, 300, 1000])
@pytest.mark.parametrize("q", [0.5, 0.95, 0.99])
def test_both_ends_of_any_quantiles_interval_are_scipys(n: int, q: float) -> None:
    # the serving load states each latency percentile's p50, p95 and p99 with both ends
    values = list(np.random.default_rng(n).exponential(size=n))
    ci = stats.quantile_test(values, p=q).confidence_interval(0.95)
    for ours, theirs in zip(quantile_interval(values, q), (ci.low, ci.high), strict=True):
        assert (math.isnan(ours) and math.isnan(theirs)) or ours == theirs, (n, q)


def test_bounding_a_p95_does_not_import_scipy_stats() -> None:
    code = (
        "import sys\n"
        "from powersweep.sweep.sampling.per_token import p95_upper_ms\n"
        "assert p95_upper_ms([float(i) for i in range(500)]) > 0\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
