"""Where the tests find the repository's files, whatever folder under tests/ a test sits in."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
PUBLISHED = REPO / "tests" / "data" / "published"
# Real curves kept beside the checkout (not in the repository); the tests that read them skip
# where they are absent.
SHARED_DATA = REPO.parent / "shared" / "data"
SHARED_3090 = SHARED_DATA / "power-cap-3090-qwen36.csv"
