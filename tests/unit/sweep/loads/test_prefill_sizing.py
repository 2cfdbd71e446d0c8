"""powersweep.sweep.loads.prefill_sizing: prefill-heavy's prompt bodies (nonce first, the words
asked for, punctuated every twelfth word, seeded) and the time-to-first-token model calibration
sizes them by: the least-squares fit of ``a n + b n^2`` with its fallbacks to a line through the
origin, and its inverse."""

from __future__ import annotations

import math
import random

import pytest

from powersweep.sweep.loads.prefill_sizing import (
    CalibrationStep,
    fit_ttft,
    make_prompt,
    tokens_for_ttft,
)

HEAD = "Summarise these notes in one sentence. Notes: "


def _prompt_words(prompt: str, nonce: str) -> list[str]:
    prefix = f"[request {nonce}] {HEAD}"
    assert prompt.startswith(prefix)
    return prompt[len(prefix) :].split(" ")


def test_a_prompt_has_the_words_asked_for_after_its_nonce_and_instruction() -> None:
    words = _prompt_words(make_prompt(30, "cap-1", random.Random(4)), "cap-1")
    assert len(words) == 30
    # every twelfth word ends a clause; no other word carries punctuation
    marked = [i for i, w in enumerate(words) if w[-1] in ".,;:"]
    assert marked == [11, 23]
    assert all(w.isalpha() for i, w in enumerate(words) if i not in marked)


def test_a_prompt_has_at_least_one_word() -> None:
    for n in (0, -3):
        assert len(_prompt_words(make_prompt(n, "z", random.Random(0)), "z")) == 1


def test_prompts_are_seeded_and_vary_from_one_to_the_next() -> None:
    first, second = random.Random(7), random.Random(7)
    assert make_prompt(200, "a", first) == make_prompt(200, "a", second)
    # the next prompt of the same generator has a body of its own: no prefix to cache
    again = make_prompt(200, "a", first)
    assert (
        _prompt_words(again, "a")[:3]
        != _prompt_words(make_prompt(200, "a", random.Random(7)), "a")[:3]
    )


def test_a_single_calibration_point_fits_a_line_through_it() -> None:
    assert fit_ttft([(2000, 1.0)]) == (0.0005, 0.0)


def test_an_exact_quadratic_is_recovered() -> None:
    a, b = 4e-4, 3e-8
    fa, fb = fit_ttft([(n, a * n + b * n * n) for n in (500, 2000, 6000, 12000)])
    assert fa == pytest.approx(a, rel=1e-9) and fb == pytest.approx(b, rel=1e-9)


def test_repeated_lengths_fall_back_to_the_line_through_the_origin() -> None:
    # one prompt length measured twice: no curvature can be told, the mean slope is the fit
    a, b = fit_ttft([(1000, 1.0), (1000, 1.2)])
    assert (a, b) == (pytest.approx(1.1e-3), 0.0)


def test_a_concave_fit_is_refused_for_a_line_through_the_origin() -> None:
    # prefill that gets faster per token with length would make b negative: a line instead
    points = [(1000, 1.0), (2000, 1.5), (4000, 2.0)]
    a, b = fit_ttft(points)
    assert b == 0.0
    assert a == pytest.approx(sum(n * t for n, t in points) / sum(n * n for n, _ in points))


def test_the_inverse_gives_the_length_whose_prefill_takes_the_target() -> None:
    assert tokens_for_ttft(5e-4, 0.0, 2.0) == pytest.approx(4000.0)
    assert tokens_for_ttft(5e-4, 1e-16, 2.0) == pytest.approx(4000.0)  # b too small to matter
    a, b = 4e-4, 3e-8
    n = tokens_for_ttft(a, b, 10.0)
    assert a * n + b * n * n == pytest.approx(10.0)
    assert n < 10.0 / a  # the quadratic term makes long prompts slower per token
    assert math.isclose(tokens_for_ttft(a, b, 0.0), 0.0, abs_tol=1e-9)


def test_a_calibration_step_keeps_what_was_sent_and_measured() -> None:
    step = CalibrationStep(words=400, prompt_tokens=610, ttft_s=0.31)
    assert step.__dict__ == {"words": 400, "prompt_tokens": 610, "ttft_s": 0.31}
