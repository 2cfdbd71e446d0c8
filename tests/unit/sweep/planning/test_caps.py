"""Which caps a sweep measures."""

from __future__ import annotations

import itertools

import pytest

from powersweep.errors import UsageError
from powersweep.sweep.gpu import PowerEnvelope
from powersweep.sweep.planning.caps import clamp_caps, default_caps, parse_caps, uniform_envelope


def env(lo: float, default: float, hi: float, cur: float | None = None) -> PowerEnvelope:
    return PowerEnvelope(lo, default, hi, default if cur is None else cur)


def test_3090_default_caps_190_to_390() -> None:
    caps = default_caps(env(100, 370, 390))
    assert caps[0] == 190 and caps[-1] == 390 and len(caps) == 21
    assert all(b - a == 10 for a, b in itertools.pairwise(caps))


def test_floor_is_min_limit_when_higher_than_half_default() -> None:
    assert default_caps(env(400, 575, 600))[0] == 400


def test_exact_max_appended_when_steps_miss_it() -> None:
    caps = default_caps(env(100, 350, 395))
    assert caps[-2:] == [390, 395]
    assert default_caps(env(100, 300, 320), step_w=25)[0] == 150


def test_floor_rounds_up_to_the_step() -> None:
    assert default_caps(env(100, 425, 450))[0] == 220  # 212.5 -> 220


@pytest.mark.parametrize("bad", ["", ",", "abc", "-5", "0", "nan", "inf", "12,x"])
def test_parse_caps_rejects(bad: str) -> None:
    with pytest.raises(UsageError):
        parse_caps(bad)


def test_parse_caps_accepts_units_and_spaces() -> None:
    assert parse_caps("260, 280W,300 w") == [260, 280, 300]


def test_clamp_warns_and_dedupes() -> None:
    warnings: list[str] = []
    caps = clamp_caps([50, 300, 300, 500, 390], env(100, 370, 390), warnings.append)
    assert caps == [100, 300, 390]
    assert len(warnings) == 2 and "50 W" in warnings[0] and "500 W" in warnings[1]


def test_uniform_envelope_is_intersection() -> None:
    u = uniform_envelope([env(100, 370, 390, 350), env(150, 450, 600)])
    assert (u.min_w, u.max_w, u.default_w, u.current_w) == (150, 390, 370, 350)
    with pytest.raises(UsageError, match="share no power limit"):
        uniform_envelope([env(100, 200, 250), env(400, 575, 600)])
