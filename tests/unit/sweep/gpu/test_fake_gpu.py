"""The fake card of the unit tests (``tests/fakes/fake_gpu.py``): its Xids, which a test appends
and the card reports once, or None for a card whose Xids cannot be read."""

from __future__ import annotations

from powersweep.sweep.gpu import Gpu
from tests.fakes.fake_gpu import FakeGpu


def test_no_xids_by_default() -> None:
    gpu: Gpu = FakeGpu()
    assert gpu.xid_events() == ()


def test_the_xids_a_test_appends_are_returned_once_in_order() -> None:
    gpu = FakeGpu(1)
    gpu.xids.extend([13, 79])  # type: ignore[union-attr]
    assert gpu.xid_events() == (13, 79)
    assert gpu.xid_events() == ()
    assert gpu.xids == [] and gpu.calls["xid_events"] == 2


def test_a_card_whose_xids_cannot_be_read_reports_none() -> None:
    gpu = FakeGpu()
    gpu.xids = None
    assert gpu.xid_events() is None
