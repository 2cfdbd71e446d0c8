"""Errors a user can act on.

Every failure a user can cause or fix is raised as a :class:`PowersweepError`; the CLI prints its
message as one ``error: ...`` line and exits with its code, never with a traceback.
"""

from __future__ import annotations


class PowersweepError(Exception):
    """A failure with a one-line, actionable message.

    Attributes:
        exit_code: Process exit code the CLI uses (2 for bad input, 1 for runtime failures).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class UsageError(PowersweepError):
    """Bad user input (an option, a file, a path): exit code 2."""

    def __init__(self, message: str) -> None:
        super().__init__(message, exit_code=2)


class GpuError(PowersweepError):
    """The GPU backend cannot do what was asked (no permission, unsupported, rejected)."""
