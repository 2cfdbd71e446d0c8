"""From an answer to a setting: what ``powersweep status`` reads and ``powersweep apply`` sets.

The reasoning: docs/apply.md, "powersweep.sweep.settings".
"""
