"""powersweep.analysis.cross_result_types: cross-mode.json's typed records read back unchanged
(nulls as None, fields in the file's order), and a wrong type is one error naming cross-mode.json
and the key."""

from __future__ import annotations

import pytest

from powersweep.analysis.cross_result_types import CrossModeResult, ModeAtCap, SharedCap
from powersweep.errors import UsageError

DOC = {
    "cap_w": 300.0,
    "worst_loss_pct": 2.5,
    "modes": [
        {
            "label": "decode-single",
            "load_mode": "decode-single",
            "metric": "narr_tps",
            "source": "runs/a",
            "sweet_spot_cap_w": 290.0,
            "sweet_spot_tps_per_w": 0.11,
            "sweet_spot_tps": 32.0,
            "tps_per_w": 0.108,
            "tps_per_w_loss_pct": 1.8,
            "tps": 33.0,
            "tps_change_vs_sweet_pct": None,
        }
    ],
    "caps": [{"cap_w": 300.0, "worst_loss_pct": 2.5}, {"cap_w": 280.0, "worst_loss_pct": None}],
    "warnings": ["the runs come from different GPUs"],
}


def test_a_cross_mode_document_round_trips_in_its_order() -> None:
    typed = CrossModeResult.from_json(DOC)
    assert typed.to_json() == DOC
    assert list(typed.to_json()) == list(DOC)
    assert list(typed.modes[0].to_json()) == list(DOC["modes"][0])  # type: ignore[index]
    assert isinstance(typed.modes[0], ModeAtCap) and isinstance(typed.caps[1], SharedCap)
    assert typed.caps[1].worst_loss_pct is None
    assert typed.modes[0].tps_change_vs_sweet_pct is None


def test_missing_keys_take_their_defaults() -> None:
    empty = CrossModeResult.from_json({})
    assert empty == CrossModeResult()
    assert (empty.cap_w, empty.modes, empty.caps, empty.warnings) == (None, [], [], [])
    assert ModeAtCap.from_json({"label": "x"}).source == ""


def test_an_int_reads_as_a_number_and_a_wrong_type_names_the_file_and_key() -> None:
    assert SharedCap.from_json({"cap_w": 300}).cap_w == 300
    with pytest.raises(UsageError) as exc:
        CrossModeResult.from_json({"modes": [{"tps": "fast"}]})
    message = str(exc.value)
    assert message.startswith("cross-mode.json does not follow its schema: ")
    assert "$.modes[0].tps" in message
    assert "analysis.json" not in message
