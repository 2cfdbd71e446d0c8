"""The HTTP client for OpenAI-compatible servers: endpoint discovery, SSE parsing, chat requests.

Knows nothing of GPUs or caps; may import ``httpx`` and the base modules (``powersweep.clock``,
``powersweep.errors``) only.
"""
