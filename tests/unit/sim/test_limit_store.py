"""powersweep.sim.limit_store: the simulated cards' settings in one JSON file (limits, other
values, clock locks), written atomically and read back by a new store on the same file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from powersweep.errors import GpuError
from powersweep.sim.limit_store import LimitStore
from powersweep.sim.physics import UNLOCKED, Locks


def test_a_missing_file_has_nothing_stored(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    assert store.get("GPU-a") is None
    assert store.get_value("GPU-a:persistence_mode") is None
    assert store.get_locks("GPU-a") == UNLOCKED
    assert not store.path.exists()  # reads never create it


def test_limits_values_and_locks_persist_across_stores_under_their_keys(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    first = LimitStore(path)
    first.put("GPU-a", 290.0)
    first.put("GPU-b", 300)
    first.put_value("GPU-a:persistence_mode", True)
    first.put_locks("GPU-a", Locks(1410.0, None))
    again = LimitStore(path)
    assert again.get("GPU-a") == 290.0
    assert again.get("GPU-b") == 300.0 and isinstance(again.get("GPU-b"), float)
    assert again.get_value("GPU-a:persistence_mode") is True
    assert again.get_locks("GPU-a") == Locks(1410.0, None)
    assert again.get_locks("GPU-b") == UNLOCKED
    assert json.loads(path.read_text()) == {
        "GPU-a": 290.0,
        "GPU-b": 300,
        "GPU-a:persistence_mode": True,
        "GPU-a#locks": {"sm": 1410.0, "mem": None},
    }


def test_a_later_put_replaces_the_value_and_leaves_no_temporary_file(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    store.put("GPU-a", 290.0)
    store.put("GPU-a", 250.0)
    assert store.get("GPU-a") == 250.0
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_a_value_that_is_not_a_number_is_no_limit(tmp_path: Path) -> None:
    store = LimitStore(tmp_path / "state.json")
    store.put_value("GPU-a", "290 W")
    store.put_value("GPU-b", None)
    assert store.get("GPU-a") is None
    assert store.get("GPU-b") is None


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "",
        "[1, 2]",
    ],
)
def test_a_damaged_file_reads_as_empty_and_is_rewritten_on_put(tmp_path: Path, text: str) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    store = LimitStore(path)
    assert store.get("GPU-a") is None
    store.put("GPU-a", 200.0)
    assert json.loads(path.read_text()) == {"GPU-a": 200.0}


def test_locks_with_junk_fields_read_as_unlocked_fields(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text(json.dumps({"GPU-a#locks": {"sm": "fast", "mem": 9751}, "GPU-b#locks": 5}))
    store = LimitStore(path)
    assert store.get_locks("GPU-a") == Locks(None, 9751.0)
    assert store.get_locks("GPU-b") == UNLOCKED


def test_an_unwritable_place_is_a_gpu_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "no-such-dir" / "state.json"
    with pytest.raises(GpuError, match=r"cannot write simulated GPU state .*no-such-dir"):
        LimitStore(path).put("GPU-a", 200.0)


def test_the_sm_clock_offset_persists_under_its_key_and_junk_reads_as_none(
    tmp_path: Path,
) -> None:
    path = tmp_path / "state.json"
    first = LimitStore(path)
    assert first.get_sm_offset("GPU-a") == 0.0  # nothing stored: the unshifted curve
    first.put_sm_offset("GPU-a", 150)
    first.put_locks("GPU-a", Locks(1560.0, None))
    again = LimitStore(path)
    assert again.get_sm_offset("GPU-a") == 150.0 and isinstance(again.get_sm_offset("GPU-a"), float)
    assert again.get_locks("GPU-a") == Locks(1560.0, None)  # beside the locks, not in them
    assert json.loads(path.read_text())["GPU-a#sm_offset_mhz"] == 150.0
    path.write_text(
        '{"GPU-a#sm_offset_mhz": "fast", "GPU-b#sm_offset_mhz": true, '
        '"GPU-c#sm_offset_mhz": Infinity, "GPU-d#sm_offset_mhz": -100}'
    )
    assert [again.get_sm_offset(f"GPU-{c}") for c in "abcd"] == [0.0, 0.0, 0.0, -100.0]
