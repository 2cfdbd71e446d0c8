"""The progress bar on real simulated runs (issue 47): its share done never goes down, however the
plan grows (an adaptive sweep's refinement, rechecks, the confirm phase, an undervolt search's
steps, retries and soaks), and a run that ends shows 100% with every point counted."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest

from powersweep.cli import main

FAST = ("--target-cap-seconds", "2", "--warmup-requests", "0", "--settle-seconds", "0.5")


class RecordingBar:
    """Stands in for tqdm: what each refresh would have drawn."""

    made: ClassVar[list[RecordingBar]] = []

    def __init__(self, total: float, desc: str = "", **_: Any) -> None:
        self.total, self.n, self.desc = total, 0, desc
        self.drawn: list[tuple[int, float, str]] = []
        self.closed = False
        RecordingBar.made.append(self)

    def set_description_str(self, text: str, refresh: bool = True) -> None:
        self.desc = text

    def set_postfix_str(self, text: str, refresh: bool = True) -> None:
        self.postfix = text

    def update(self, n: int = 1) -> None:
        self.n += n

    def refresh(self) -> None:
        self.drawn.append((self.n, self.total, self.desc))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def bars(monkeypatch: pytest.MonkeyPatch) -> list[RecordingBar]:
    RecordingBar.made = []
    monkeypatch.setattr("powersweep.cli.sweep.tqdm", RecordingBar)
    return RecordingBar.made


def _shares(bar: RecordingBar) -> list[float]:
    return [n / total for n, total, _ in bar.drawn]


def _rows_measured(run_root: Path) -> int:
    (run,) = [p for p in run_root.iterdir() if p.is_dir()]
    lines = (run / "caps.csv").read_text().splitlines()
    return len(lines) - 1


@pytest.mark.parametrize(
    "args",
    [
        ("--strategy", "adaptive"),  # the plan grows as the coarse pass learns
        ("--axis", "undervolt", "--cap", "300"),  # steps come one at a time, then soaks
    ],
    ids=["adaptive", "undervolt"],
)
def test_a_simulated_runs_bar_never_runs_back_and_ends_full(
    bars: list[RecordingBar], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...]
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    out = tmp_path / "runs"
    code = main(
        ["--simulate", "rtx3090-air", "--cooling", "air", *args, *FAST, "--no-charts",
         "--out", str(out)]
    )  # fmt: skip
    assert code == 0
    (bar,) = bars
    shares = _shares(bar)
    assert len(shares) >= 5 and bar.closed
    assert shares == sorted(shares)  # never backwards
    n, total, desc = bar.drawn[-1]
    measured = _rows_measured(out)
    # full only once every point was measured (the re-read, then the loop's end, draw it)
    assert all(n == measured for n, total, _ in bar.drawn if n >= total)
    assert (n, total) == (measured, measured)  # 100%, every measured point counted
    assert desc.split("/")[0] == desc.split("/")[1].split()[0] == str(measured)
