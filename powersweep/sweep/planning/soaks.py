"""The soak ladder both offset searches end with (SM and memory, issue 45): the answer held under
the load and checked once more; a soak that fails backs off by the margin and soaks again, down
to offset 0, which needs none.

Pure: the caller says whether an offset was measured ok already and how each soak ended.
"""

from __future__ import annotations

from collections.abc import Callable


class SoakLadder:
    """Soaks from a first offset down, one step each time one fails.

    Args:
        back_mhz: What a failed soak backs off by.
        snap: Where an offset lands (the SM offsets' 15 MHz grid; the memory's: as it is).
    """

    def __init__(self, back_mhz: float, snap: Callable[[float], float] = float) -> None:
        self.back_mhz = back_mhz
        self.snap = snap
        self.at_mhz: float | None = None
        self.soaks: list[tuple[float, str]] = []
        self.chosen_mhz: float | None = None

    def next(
        self, first_mhz: float, measured_ok: Callable[[float], bool], soak_s: float
    ) -> float | None:
        """The offset to soak now (None: the answer is chosen, or was already): ``first_mhz``
        the first time. Offset 0 is the card's own curve, and a step already measured ok needs
        no soak where none is asked (``soak_s`` 0); an offset no step measured is measured."""
        if self.chosen_mhz is not None:
            return None
        if self.at_mhz is None:
            self.at_mhz = max(0.0, self.snap(first_mhz))
        if self.at_mhz <= 0 or (soak_s <= 0 and measured_ok(self.at_mhz)):
            self.chosen_mhz = self.at_mhz
            return None
        return self.at_mhz

    def took(self, status: str) -> None:
        """The soak's status: ok chooses its offset, anything else backs off."""
        if self.at_mhz is None:
            return
        self.soaks.append((self.at_mhz, status))
        if status == "ok":
            self.chosen_mhz = self.at_mhz
        else:
            self.at_mhz = max(0.0, self.snap(self.at_mhz - self.back_mhz))
