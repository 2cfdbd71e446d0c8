"""The prompts of the measured load.

Decode modes use one narrative and one code prompt (as the reference script does), so results
compare with community data. Each request's text starts with a nonce where a mode needs to defeat
prefix caches: caches match from the start of the prompt.
"""

from __future__ import annotations

NARRATIVE_PROMPT = (
    "Write a long, detailed short story about a lighthouse keeper on a remote island who "
    "discovers that the lamp has started signalling on its own at night. Describe the island, "
    "the weather, the keeper's routine, the supply boat, and how the mystery unfolds over a "
    "winter. Use vivid, concrete detail and keep the story going."
)

CODE_PROMPT = (
    "Write a complete, well-commented Python module that implements an LRU cache with a "
    "time-to-live per entry, thread safety, hit and miss statistics, and a decorator for "
    "caching function results. Include type hints and a few usage examples at the end."
)

# (kind, prompt): each request's max_tokens is sized from the measured rate to end with its
# window (:class:`powersweep.sweep.loads.pace.Pace`).
DECODE_PROMPTS: tuple[tuple[str, str], ...] = (
    ("narr", NARRATIVE_PROMPT),
    ("code", CODE_PROMPT),
)


def with_nonce(prompt: str, nonce: str) -> str:
    """Prefix a prompt with a nonce so no prefix cache can serve it."""
    return f"[request {nonce}] {prompt}"
