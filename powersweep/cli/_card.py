"""Options that tell ``analyze``, ``plot`` and ``compare`` about the card behind a bare caps.csv
(a community curve has no run.json)."""

from __future__ import annotations

from typing import Annotated

from powersweep.analysis.context import CardFacts
from powersweep.cli.help_layout import option

CARD = "The card (for a bare caps.csv)"

GpuName = Annotated[
    str | None, option("--gpu-name", metavar="NAME", help="The GPU's name.", panel=CARD)
]
DefaultLimit = Annotated[
    float | None,
    option(
        "--default-limit",
        metavar="W",
        help="The card's default power limit (for % of default).",
        doc="The card's default power limit, W: % of default, the default-limit line, "
        "compare --x pct-tdp.",
        panel=CARD,
    ),
]
MinLimit = Annotated[
    float | None,
    option("--min-limit", metavar="W", help="The card's lowest settable limit.", panel=CARD),
]
MaxLimit = Annotated[
    float | None,
    option("--max-limit", metavar="W", help="The card's highest settable limit.", panel=CARD),
]


def card_facts(
    gpu_name: str | None,
    default_limit: float | None,
    min_limit: float | None,
    max_limit: float | None,
) -> CardFacts:
    """The facts given (raises UsageError for impossible limits)."""
    return CardFacts(
        gpu_name=gpu_name.strip() if gpu_name and gpu_name.strip() else None,
        default_limit_w=default_limit,
        min_limit_w=min_limit,
        max_limit_w=max_limit,
    )
