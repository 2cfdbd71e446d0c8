"""Options that tell ``analyze``, ``plot`` and ``compare`` about the card behind a bare caps.csv
(a community curve has no run.json)."""

from __future__ import annotations

from typing import Annotated

import typer

from powersweep.analysis.context import CardFacts

CARD = "The card (for a bare caps.csv)"

GpuName = Annotated[
    str | None,
    typer.Option("--gpu-name", help="The GPU's name.", rich_help_panel=CARD),
]
DefaultLimit = Annotated[
    float | None,
    typer.Option(
        "--default-limit",
        help="The card's default power limit, W: % of default, the default-limit line, "
        "compare --x pct-tdp.",
        rich_help_panel=CARD,
    ),
]
MinLimit = Annotated[
    float | None,
    typer.Option("--min-limit", help="The card's lowest settable limit, W.", rich_help_panel=CARD),
]
MaxLimit = Annotated[
    float | None,
    typer.Option("--max-limit", help="The card's highest settable limit, W.", rich_help_panel=CARD),
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
