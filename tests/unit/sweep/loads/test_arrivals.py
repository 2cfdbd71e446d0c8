"""The serving load's arrival schedule (``sweep/loads/arrivals.py``): rate and inter-arrival
spread against theory, determinism and the prefix property, lengths from the trace's quantiles,
the prompts file."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from powersweep.errors import UsageError
from powersweep.sweep.loads.arrivals import (
    QUANTILES,
    ArrivalProcess,
    LengthProfile,
    ScheduleSpec,
    arrivals,
    quantile_draw,
    read_prompts,
    schedule,
)

N = 4000


def _gaps(spec: ScheduleSpec, n: int = N) -> np.ndarray:
    times = [a.t_s for a in itertools.islice(arrivals(spec), n)]
    return np.diff([0.0, *times])


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_gaps_are_exponential_at_the_rate(seed: int) -> None:
    rate = 2.5
    gaps = _gaps(ScheduleSpec(rate, ArrivalProcess.POISSON, seed=seed))
    # Kolmogorov-Smirnov against Exp(1/rate): a wrong rate or law fails at this n
    assert stats.kstest(gaps, stats.expon(scale=1 / rate).cdf).pvalue > 0.001
    assert np.mean(gaps) == pytest.approx(1 / rate, rel=0.05)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.06)


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_gamma_gaps_have_the_rate_and_cv_of_their_shape(burstiness: float) -> None:
    rate = 3.0
    spec = ScheduleSpec(rate, ArrivalProcess.GAMMA, burstiness=burstiness, seed=7)
    gaps = _gaps(spec)
    law = stats.gamma(burstiness, scale=1 / (rate * burstiness))
    assert stats.kstest(gaps, law.cdf).pvalue > 0.001
    assert np.mean(gaps) == pytest.approx(1 / rate, rel=0.08)
    # a Gamma's coefficient of variation is 1/sqrt(shape)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1 / math.sqrt(burstiness), rel=0.1)


def test_constant_arrivals_are_one_over_the_rate_apart() -> None:
    times = [a.t_s for a in itertools.islice(arrivals(ScheduleSpec(4.0, "constant")), 10)]
    assert times == pytest.approx([0.25 * (k + 1) for k in range(10)])


def test_the_schedule_is_a_pure_function_and_a_longer_one_extends_a_shorter() -> None:
    spec = ScheduleSpec(2.0, seed=11)
    short, long = schedule(spec, 0.0, 30.0), schedule(spec, 0.0, 90.0)
    assert short == schedule(ScheduleSpec(2.0, seed=11), 0.0, 30.0)
    assert long[: len(short)] == short
    assert schedule(spec, 30.0, 90.0) == long[len(short) :]
    assert schedule(ScheduleSpec(2.0, seed=12), 0.0, 30.0) != short


def test_a_rate_changes_the_times_never_the_lengths() -> None:
    slow = list(itertools.islice(arrivals(ScheduleSpec(1.0, seed=5)), 50))
    fast = list(itertools.islice(arrivals(ScheduleSpec(8.0, seed=5)), 50))
    assert [(a.prompt_tokens, a.output_tokens) for a in slow] == [
        (a.prompt_tokens, a.output_tokens) for a in fast
    ]
    assert [a.t_s for a in slow] != [a.t_s for a in fast]


@pytest.mark.parametrize("profile", list(LengthProfile))
def test_lengths_follow_the_trace_quantiles(profile: LengthProfile) -> None:
    drawn = list(itertools.islice(arrivals(ScheduleSpec(1.0, seed=3, profile=profile)), N))
    prompt_table, output_table = QUANTILES[profile]
    for table, values in (
        (prompt_table, [a.prompt_tokens for a in drawn]),
        (output_table, [a.output_tokens for a in drawn]),
    ):
        median = dict(table)[50]
        assert np.median(values) == pytest.approx(median, rel=0.1, abs=2)


def test_quantile_draw_interpolates_between_rows() -> None:
    table = ((0, 10), (50, 20), (100, 40))
    assert quantile_draw(table, 0.0) == 10
    assert quantile_draw(table, 0.25) == 15
    assert quantile_draw(table, 0.75) == 30


def test_the_server_context_bounds_a_prompt_and_its_answer() -> None:
    spec = ScheduleSpec(1.0, seed=1, max_prompt_tokens=512)
    for a in itertools.islice(arrivals(spec), 500):
        assert a.prompt_tokens is not None and a.prompt_tokens <= max(1, 512 - a.output_tokens)


def test_a_prompts_file_gives_the_prompts_and_its_answer_lengths(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(
        '{"prompt": "Say hi", "output_tokens": 7}\n'
        "\n"
        '{"conversations": [{"from": "human", "value": "Tell a story"}, '
        '{"from": "gpt", "value": "Once"}]}\n'
    )
    prompts = read_prompts(path)
    assert [(p.text, p.output_tokens) for p in prompts] == [("Say hi", 7), ("Tell a story", None)]
    spec = ScheduleSpec(1.0, seed=2, prompts=prompts)
    drawn = list(itertools.islice(arrivals(spec), 40))
    assert {a.prompt for a in drawn} == {"Say hi", "Tell a story"}
    assert all(a.output_tokens == 7 for a in drawn if a.prompt == "Say hi")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "holds no prompt"),
        ("not json\n", "line 1"),
        ('{"prompt": ""}\n', "no prompt"),
        ('{"conversations": [{"from": "gpt", "value": "x"}]}\n', "no prompt"),
        ('{"prompt": "x", "output_tokens": 0}\n', "output_tokens"),
        ('{"prompt": 5}\n', "line 1"),
    ],
)
def test_a_bad_prompts_file_is_one_line_naming_it(tmp_path: Path, text: str, says: str) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=says) as info:
        read_prompts(path)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_a_missing_prompts_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="--prompts-file"):
        read_prompts(tmp_path / "none.jsonl")
