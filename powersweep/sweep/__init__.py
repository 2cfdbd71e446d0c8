"""The sweep: everything that runs while the card is being measured.

One subpackage per concern: ``gpu`` (the GPU protocol and its backends), ``server`` (the HTTP
client of OpenAI-compatible servers), ``loads`` (the load modes), ``sampling`` (sampler, settle,
per-cap figures), ``planning`` (which caps), ``records`` (run directory, restore journal, file
ownership).

The reasoning: docs/architecture.md, "powersweep.sweep".
"""
