"""The p95's upper confidence bound without scipy.stats: SciPy's figure, without its import.

Importing ``scipy.stats`` to bound a p95 cost a sweep process about two CPU seconds (a large share
of a whole decode-concurrent sweep's CPU); the order statistic is now found from the binomial
tail directly.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

from powersweep.sweep.sampling.per_token import _binomial_isf, p95_upper_ms


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


def test_the_binomial_tail_index_is_scipys() -> None:
    for n in [*range(2, 400), 997, 5000, 123457]:
        for p, tail in ((0.95, 0.025), (0.5, 0.025), (0.9, 0.05)):
            assert _binomial_isf(n, p, tail) == int(stats.binom(n, p).isf(tail)), (n, p, tail)


def test_bounding_a_p95_does_not_import_scipy_stats() -> None:
    code = (
        "import sys\n"
        "from powersweep.sweep.sampling.per_token import p95_upper_ms\n"
        "assert p95_upper_ms([float(i) for i in range(500)]) > 0\n"
        "print('scipy.stats' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
