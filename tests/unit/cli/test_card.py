"""powersweep.cli._card: the card facts ``analyze``, ``plot`` and ``compare`` take for a bare
caps.csv (``--gpu-name``, ``--default-limit``, ``--min-limit``, ``--max-limit``).
test_card_facts.py follows them through the commands."""

from __future__ import annotations

import pytest

from powersweep.cli import main
from powersweep.cli._card import card_facts
from powersweep.errors import UsageError


def test_the_name_is_trimmed_and_a_blank_one_is_no_name() -> None:
    facts = card_facts("  RTX 3090 ", 370.0, 100.0, 390.0)
    assert (facts.gpu_name, facts.default_limit_w, facts.min_limit_w, facts.max_limit_w) == (
        "RTX 3090",
        370.0,
        100.0,
        390.0,
    )
    assert card_facts("   ", None, None, None).gpu_name is None
    assert card_facts(None, None, None, None).empty


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ((0.0, None, None), "--default-limit must be positive watts"),
        ((None, -1.0, None), "--min-limit must be positive watts"),
        ((None, None, float("inf")), "--max-limit must be positive watts"),
        ((370.0, 380.0, None), "--min-limit <= --default-limit <= --max-limit"),
        ((400.0, None, 390.0), "--min-limit <= --default-limit <= --max-limit"),
    ],
)
def test_impossible_limits_are_a_usage_error_naming_the_option(
    limits: tuple[float | None, float | None, float | None], message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        card_facts("x", *limits)


def test_the_options_sit_in_their_own_help_panel(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plot", "--help"]) == 0
    out = capsys.readouterr().out
    panel = out[out.index("The card (for a bare caps.csv)") :]
    for flag in ("--gpu-name", "--default-limit", "--min-limit", "--max-limit"):
        assert flag in panel
