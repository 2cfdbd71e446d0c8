"""`fleet apply`'s choice per card (``sweep/settings/fleet_targets.py``: group by GPU model or a
mixed rig's cards, outliers' own best, axis), its bad input, and apply's journal written before
the first change (kept when a card cannot be put back)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.analysis.fleet_result_types import FleetReport
from powersweep.cli import main
from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu import GpuIdentity
from powersweep.sweep.records.journal import Journal
from powersweep.sweep.settings.applier import plan_caps
from powersweep.sweep.settings.fleet_targets import choose_settings, read_fleet, same_host
from powersweep.sweep.settings.journaled import apply_journaled, journal_entry
from powersweep.sweep.settings.targets import Target

H100 = "NVIDIA H100 80GB HBM3"


def _target(uuid: str, name: str = H100, index: int = 0) -> Target:
    ident = GpuIdentity(index=index, name=name, uuid=uuid, vram_mib=0, driver_version="t")
    return Target(gpu=None, identity=ident, measured=None, matched_by="named")  # type: ignore[arg-type]


def _typed_report(fleet: dict[str, Any]) -> FleetReport:
    """The report as ``fleet apply`` reads it (fleet.json, typed)."""
    return FleetReport.from_json(fleet)


def _answer_group(axis: str, answer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    clock = axis != "power"
    return {
        "gpu_name": H100,
        "load_mode": "decode-single",
        "model": "m",
        "axis": {
            "name": axis,
            "setting_key": "sm_lock_mhz" if clock else "cap_w",
            "tier_key": None,
            "answer_key": "fleet_lock" if clock else "fleet_cap",
        },
        "fleet_lock" if clock else "fleet_cap": answer,
        "outliers": [],
        "cards": [],
        **extra,
    }


def test_cards_get_the_fleet_lock_and_a_named_outlier_its_own_best() -> None:
    outlier = {
        "label": "n2",
        "host": "n2",
        "gpus": [{"uuid": "GPU-b", "name": H100}],
        "causes": [{"code": "hot", "message": "hot card"}],
        "own_best": {"sm_lock_mhz": 1185.0},
        "apply": "own_best",
    }
    fleet = {
        "groups": [
            _answer_group(
                "sm-clock", {"sm_lock_mhz": 1425.0, "fleet_tps_per_w": 0.15}, outliers=[outlier]
            )
        ]
    }
    a, b = _target("GPU-a"), _target("GPU-b", index=1)
    chosen, unmatched = choose_settings(_typed_report(fleet), [a, b], "n2")
    assert unmatched == []
    assert [(c.source, c.sm_lock_mhz, c.cap_w) for c in chosen] == [
        ("fleet", 1425.0, None),
        ("own_best", 1185.0, None),
    ]
    assert "hot card" in chosen[1].why
    # the same UUID on another node is another card (simulated cards share UUIDs)
    chosen, _ = choose_settings(_typed_report(fleet), [b], "n3")
    assert chosen[0].source == "fleet"


def test_power_and_clock_groups_pick_the_better_axis_or_the_one_asked() -> None:
    fleet = {
        "groups": [
            _answer_group("power", {"cap_w": 400.0, "fleet_tps_per_w": 0.14}),
            _answer_group("sm-clock", {"sm_lock_mhz": 1425.0, "fleet_tps_per_w": 0.155}),
        ]
    }
    t = _target("GPU-a")
    (best,), _ = choose_settings(_typed_report(fleet), [t], "n1")
    assert (best.axis, best.sm_lock_mhz) == ("sm-clock", 1425.0)
    (power,), _ = choose_settings(_typed_report(fleet), [t], "n1", axis="power")
    assert (power.axis, power.cap_w, power.sm_lock_mhz) == ("power", 400.0, None)


def test_several_workloads_for_one_gpu_need_a_choice_and_other_models_are_left() -> None:
    other = {**_answer_group("power", {"cap_w": 300.0}), "load_mode": "prefill-heavy"}
    fleet = {"groups": [_answer_group("power", {"cap_w": 400.0}), other]}
    with pytest.raises(UsageError, match="--load-mode"):
        choose_settings(_typed_report(fleet), [_target("GPU-a")], "n1")
    (c,), _ = choose_settings(
        _typed_report(fleet), [_target("GPU-a")], "n1", load_mode="prefill-heavy"
    )
    assert c.cap_w == 300.0
    chosen, unmatched = choose_settings(
        _typed_report(fleet), [_target("GPU-x", name="RTX 4090")], "n1"
    )
    assert chosen == [] and [t.identity.uuid for t in unmatched] == ["GPU-x"]


def test_a_clock_group_that_held_a_cap_sets_it_with_the_lock() -> None:
    answer = {"sm_lock_mhz": 1410.0, "held_cap_w": 500.0, "fleet_tps_per_w": 0.1}
    (c,), _ = choose_settings(
        _typed_report({"groups": [_answer_group("sm-clock", answer)]}), [_target("G")], "n"
    )
    assert (c.sm_lock_mhz, c.cap_w) == (1410.0, 500.0)
    assert c.describe() == "SM 1410 MHz at 500 W"


def _clock_group(axis: str, answer: dict[str, Any], **extra: Any) -> dict[str, Any]:
    """A memory-lock or grid group as fleet.json writes it (fleet_axis.AXES)."""
    keys = {"mem-clock": ("mem_lock_mhz", None), "grid": ("sm_lock_mhz", "mem_lock_mhz")}
    setting_key, tier_key = keys[axis]
    return {
        **_answer_group("sm-clock", answer, **extra),
        "axis": {
            "name": axis,
            "setting_key": setting_key,
            "tier_key": tier_key,
            "answer_key": "fleet_lock",
        },
    }


def test_a_memory_lock_group_sets_the_memory_clock_alone() -> None:
    answer = {"mem_lock_mhz": 12001.0, "held_cap_w": None, "fleet_tps_per_w": 0.09}
    group = _clock_group("mem-clock", answer)
    (c,), _ = choose_settings(_typed_report({"groups": [group]}), [_target("GPU-a")], "n1")
    assert (c.axis, c.source, c.cap_w, c.sm_lock_mhz, c.mem_lock_mhz) == (
        "mem-clock",
        "fleet",
        None,
        None,
        12001.0,
    )
    assert c.describe() == "memory 12001 MHz"


def test_a_grid_group_sets_both_locks_and_its_outlier_gets_its_own_pair() -> None:
    outlier = {
        "label": "n2",
        "host": "n2",
        "gpus": [{"uuid": "GPU-b", "name": H100}],
        "causes": [{"code": "hot", "message": "hot card"}],
        "own_best": {"sm_lock_mhz": 1800.0, "mem_lock_mhz": 10001.0},
        "apply": "own_best",
    }
    answer = {
        "sm_lock_mhz": 2400.0,
        "mem_lock_mhz": 12001.0,
        "held_cap_w": 500.0,
        "fleet_tps_per_w": 0.1,
        "within_noise": {"x": [2400.0, 1800.0], "tier": 12001.0},
    }
    group = _clock_group("grid", answer, outliers=[outlier])
    a, b = _target("GPU-a"), _target("GPU-b", index=1)
    chosen, _ = choose_settings(_typed_report({"groups": [group]}), [a, b], "n2")
    assert [(c.source, c.sm_lock_mhz, c.mem_lock_mhz, c.cap_w) for c in chosen] == [
        ("fleet", 2400.0, 12001.0, 500.0),
        # the outlier's own pair, under the limit its group held
        ("own_best", 1800.0, 10001.0, 500.0),
    ]
    assert chosen[0].describe() == "SM 2400 MHz / memory 12001 MHz at 500 W"
    assert "1800-2400 within noise" in chosen[0].why and "hot card" in chosen[1].why


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing", "no such fleet report folder"),
        (lambda d: d, "no fleet.json in it"),
        (lambda d: _write_in(d / "fleet.json", "{not json"), "not a readable fleet report"),
        (lambda d: _write_in(d / "fleet.json", '{"groups": []}'), "no group with an answer"),
        (lambda d: _write_in(d / "fleet.json", "[1, 2]"), "not a fleet report"),
    ],
)
def test_bad_report_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Any, message: str
) -> None:
    path = make(tmp_path)
    with pytest.raises(UsageError, match=message):
        read_fleet(path)
    assert main(["fleet", "apply", str(path), "--dry-run", "--simulate", "h100-sxm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_no_matching_card_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _write_in(
        tmp_path / "fleet.json", json.dumps({"groups": [_answer_group("power", {"cap_w": 400.0})]})
    )
    state = tmp_path / "state.json"
    code = main(
        ["fleet", "apply", str(tmp_path), "--simulate", "rtx4090-air", "--sim-state", str(state)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert "no card on" in err and "nothing was changed" in err
    assert not state.exists()


def _write_in(path: Path, text: str) -> Path:
    path.write_text(text)
    return path.parent


class _Card:
    """A card whose writes the test watches: the journal must be on disk before the first."""

    def __init__(self, journal: Journal, limit_w: float, refuses: bool = False) -> None:
        self.journal = journal
        self.limit_w = limit_w
        self.refuses = refuses
        self.seen: list[Any] = []
        self.fail_put_back = False

    def envelope(self) -> Any:
        from powersweep.sweep.gpu import PowerEnvelope

        return PowerEnvelope(100.0, 450.0, 600.0, self.limit_w)

    def set_power_limit(self, watts: float) -> Any:
        from powersweep.sweep.gpu import SetLimitResult

        self.seen.append(self.journal.read())
        if self.refuses or (self.fail_put_back and watts == 400.0):
            return SetLimitResult(watts, self.limit_w, self.limit_w, False, "refused")
        self.limit_w = watts
        return SetLimitResult(watts, watts, watts, True)


def _journaled_targets(journal: Journal, refuses_second: bool) -> tuple[list[_Card], list[Target]]:
    cards = [_Card(journal, 400.0), _Card(journal, 400.0, refuses=refuses_second)]
    targets = [
        Target(c, GpuIdentity(i, "card", f"GPU-{i}", 0, "t"), None, "named")  # type: ignore[arg-type]
        for i, c in enumerate(cards)
    ]
    return cards, targets


def test_apply_writes_the_journal_before_the_first_change_and_removes_it_after(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    cards, targets = _journaled_targets(journal, refuses_second=False)
    caps = plan_caps(targets, 300.0, strict=False, warn=lambda m: None)
    entry = journal_entry(targets, caps, [], {"kind": "nvml"})
    apply_journaled(journal, entry, caps, [], lambda m: None)
    first = cards[0].seen[0]
    assert first is not None and [g.original_limit_w for g in first.gpus] == [400.0, 400.0]
    assert [c.limit_w for c in cards] == [300.0, 300.0]
    assert not journal.exists()


def test_a_refused_card_puts_the_others_back_and_the_journal_goes_unless_one_stays(
    tmp_path: Path,
) -> None:
    journal = Journal(tmp_path)
    cards, targets = _journaled_targets(journal, refuses_second=True)
    caps = plan_caps(targets, 300.0, strict=False, warn=lambda m: None)
    entry = journal_entry(targets, caps, [], {"kind": "nvml"})
    with pytest.raises(GpuError, match="put back"):
        apply_journaled(journal, entry, caps, [], lambda m: None)
    assert cards[0].limit_w == 400.0 and not journal.exists()
    # the first card then refuses to go back: the journal stays for `powersweep restore`
    cards, targets = _journaled_targets(journal, refuses_second=True)
    cards[0].fail_put_back = True
    caps = plan_caps(targets, 300.0, strict=False, warn=lambda m: None)
    warned: list[str] = []
    with pytest.raises(GpuError, match="NOT put back"):
        apply_journaled(
            journal, journal_entry(targets, caps, [], {"kind": "nvml"}), caps, [], warned.append
        )
    kept = journal.read()
    assert kept is not None and kept.gpus[0].original_limit_w == 400.0
    assert any("powersweep restore" in w for w in warned)


# --- hosts, rigs of mixed cards, outliers the report keeps in the fleet, no answer ---------------


def test_a_host_is_the_same_machine_by_its_short_name() -> None:
    assert same_host("n2.cluster.local", "n2") and same_host("n2", "n2.ib")
    assert not same_host("n2", "n20") and not same_host(None, "n2") and not same_host("", "")


def test_a_card_of_a_mixed_rig_matches_the_rigs_group_and_reads_as_a_record() -> None:
    group = {
        **_answer_group("power", {"cap_w": 380.0, "fleet_tps_per_w": 0.12}),
        "gpu_name": "mixed rig",
        "cards": [{"gpus": [{"name": "NVIDIA GeForce RTX 4090"}, {"name": H100}]}],
    }
    (c,), unmatched = choose_settings(_typed_report({"groups": [group]}), [_target("GPU-a")], "n1")
    assert unmatched == [] and c.describe() == "380 W"
    assert c.to_dict() == {
        "index": 0,
        "uuid": "GPU-a",
        "name": H100,
        "group": "mixed rig · decode-single · m · power",
        "axis": "power",
        "source": "fleet",
        "cap_w": 380.0,
        "sm_lock_mhz": None,
        "mem_lock_mhz": None,
        "why": "the group's fleet cap",
    }


def test_a_group_without_an_axis_is_a_power_group() -> None:
    group = {"gpu_name": H100, "load_mode": "x", "model": "m", "fleet_cap": {"cap_w": 300}}
    (c,), _ = choose_settings(_typed_report({"groups": [group]}), [_target("GPU-a")], "n1")
    assert (c.axis, c.cap_w) == ("power", 300.0)


def test_an_outlier_the_report_keeps_in_the_fleet_gets_the_fleets_answer() -> None:
    outlier = {"host": "n1", "gpus": [{"uuid": "GPU-a"}], "apply": "fleet", "own_best": {}}
    group = _answer_group("power", {"cap_w": 300.0}, outliers=[outlier])
    (c,), _ = choose_settings(_typed_report({"groups": [group]}), [_target("GPU-a")], "n1.example")
    assert (c.source, c.cap_w) == ("fleet", 300.0)


def test_a_group_with_no_usable_answer_is_refused() -> None:
    group = _answer_group("power", {"cap_w": -1.0})
    with pytest.raises(UsageError, match=r"GPU 0 .* has no answer to apply$"):
        choose_settings(_typed_report({"groups": [group]}), [_target("GPU-a")], "n1")
