"""sweep/settings: GPU matching, clamped verified apply with rollback, recommendations, status."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import GpuError, UsageError
from powersweep.sweep.gpu.nvml import NvmlBackend
from powersweep.sweep.settings.applier import apply_caps, enable_persistence, plan_caps
from powersweep.sweep.settings.card_status import (
    read_gpu_status,
    read_journal_status,
    render_status,
)
from powersweep.sweep.settings.recommendation import MeasuredGpu, read_recommendation
from powersweep.sweep.settings.targets import match_run_gpus, parse_gpu_selection, select_gpus
from tests.fakes import fake_pynvml
from tests.fakes.fake_pynvml import FakeDevice, FakeNvml

UUID_A = "GPU-aaaaaaaa-0000-0000-0000-000000000000"
UUID_B = "GPU-bbbbbbbb-0000-0000-0000-000000000000"
RTX3090 = "NVIDIA GeForce RTX 3090"


def _fake_backend(*devices: FakeDevice) -> tuple[Any, NvmlBackend]:
    fake = FakeNvml(devices=list(devices))
    return fake, NvmlBackend(nvml=fake)


def _warnings() -> tuple[list[str], Any]:
    seen: list[str] = []
    return seen, seen.append


# --- matching a run's GPUs -----------------------------------------------------------------


def test_run_gpus_match_by_uuid_even_when_the_index_moved() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_B), FakeDevice(uuid=UUID_A))
    seen, warn = _warnings()
    (t,) = match_run_gpus(backend, [MeasuredGpu(0, RTX3090, UUID_A)], warn=warn)
    assert (t.identity.index, t.identity.uuid, t.matched_by) == (1, UUID_A, "uuid")
    assert any("is GPU 1 now" in w for w in seen)


def test_another_card_at_the_index_is_refused_without_force() -> None:
    fake, backend = _fake_backend(FakeDevice(uuid=UUID_B))
    measured = [MeasuredGpu(0, RTX3090, UUID_A)]
    with pytest.raises(UsageError, match=r"GPU 0 .*not the card the run measured.*--force"):
        match_run_gpus(backend, measured, warn=lambda _m: None)
    seen, warn = _warnings()
    (t,) = match_run_gpus(backend, measured, force=True, warn=warn)
    assert t.identity.uuid == UUID_B and t.matched_by == "forced"
    assert any("applying anyway" in w for w in seen)
    assert fake.calls_to("nvmlDeviceSetPowerManagementLimit") == 0


def test_another_model_is_named_as_such() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_B, name="NVIDIA GeForce RTX 4090"))
    with pytest.raises(UsageError, match="another model"):
        match_run_gpus(backend, [MeasuredGpu(0, RTX3090, UUID_A)], warn=lambda _m: None)


def test_a_run_without_uuids_falls_back_to_name_and_index_with_a_warning() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_A))
    seen, warn = _warnings()
    (t,) = match_run_gpus(backend, [MeasuredGpu(0, RTX3090, None)], warn=warn)
    assert t.matched_by == "name and index"
    assert any("no UUID" in w for w in seen)
    with pytest.raises(UsageError, match="another model"):
        match_run_gpus(backend, [MeasuredGpu(0, "NVIDIA A100", None)], warn=warn)


def test_a_measured_gpu_that_is_not_there_is_an_error() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_A))
    with pytest.raises(UsageError, match=r"measured GPU 1 .*not on this machine"):
        match_run_gpus(
            backend,
            [MeasuredGpu(0, RTX3090, UUID_A), MeasuredGpu(1, RTX3090, UUID_B)],
            force=True,
            warn=lambda _m: None,
        )


def test_gpus_option_picks_cards_by_index_or_uuid() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_A), FakeDevice(uuid=UUID_B))
    assert parse_gpu_selection(" 1, gpu-aaaaaaaa-0000-0000-0000-000000000000") == (
        "1",
        "gpu-aaaaaaaa-0000-0000-0000-000000000000",
    )
    picked = select_gpus(backend, parse_gpu_selection(f"1,{UUID_A}"), lambda _m: None)
    assert [t.identity.index for t in picked] == [1, 0]
    seen, warn = _warnings()
    assert len(select_gpus(backend, None, warn)) == 2
    assert any("all 2 GPUs" in w for w in seen)
    with pytest.raises(UsageError, match="there is no GPU 3"):
        select_gpus(backend, ("3",), lambda _m: None)
    for bad in ("", "zero", "0,x"):
        with pytest.raises(UsageError, match="--gpus"):
            parse_gpu_selection(bad)
    # --gpus with a run: a card the run did not measure needs --force
    with pytest.raises(UsageError, match="--force"):
        match_run_gpus(
            backend, [MeasuredGpu(0, RTX3090, UUID_A)], selection=("1",), warn=lambda _m: None
        )


# --- plan, apply, verify, roll back --------------------------------------------------------


def test_plan_clamps_to_each_envelope_or_refuses_with_strict() -> None:
    _, backend = _fake_backend(FakeDevice(uuid=UUID_A, min_mw=100_000, max_mw=390_000))
    targets = select_gpus(backend, None, lambda _m: None)
    seen, warn = _warnings()
    (c,) = plan_caps(targets, 420, strict=False, warn=warn)
    assert (c.requested_w, c.after_w, c.before_w, c.clamped) == (420, 390, 350, True)
    assert any("clamped to 390 W" in w for w in seen)
    with pytest.raises(UsageError, match=r"outside the range.*100-390 W \(--strict\)"):
        plan_caps(targets, 60, strict=True, warn=warn)
    (reset,) = plan_caps(targets, None, strict=True, warn=warn)
    assert reset.after_w == 350.0 == reset.default_w
    with pytest.raises(UsageError, match="positive"):
        plan_caps(targets, -5, strict=False, warn=warn)


def test_apply_verifies_by_read_back() -> None:
    fake, backend = _fake_backend(FakeDevice(uuid=UUID_A, limit_mw=370_000))
    plan = plan_caps(select_gpus(backend, None, lambda _m: None), 290, strict=False, warn=print)
    (r,) = apply_caps(plan, lambda _m: None)
    assert r.readback_w == 290.0 and fake.devices[0].limit_mw == 290_000


def test_a_card_that_refuses_rolls_the_others_back() -> None:
    # GPU 1 says yes to 250 W and keeps 350 W (a card with a silent floor)
    fake, backend = _fake_backend(
        FakeDevice(uuid=UUID_A, limit_mw=370_000),
        FakeDevice(uuid=UUID_B, limit_mw=350_000, silent_floor_mw=300_000),
    )
    plan = plan_caps(select_gpus(backend, None, lambda _m: None), 250, strict=False, warn=print)
    with pytest.raises(GpuError, match=r"GPU 1 .*kept a 350 W.*already changed were put back"):
        apply_caps(plan, lambda _m: None)
    assert [d.limit_mw for d in fake.devices] == [370_000, 350_000]


def test_no_permission_changes_nothing_and_asks_for_root() -> None:
    fake, backend = _fake_backend(
        FakeDevice(
            uuid=UUID_A,
            fail={"nvmlDeviceSetPowerManagementLimit": fake_pynvml.NVML_ERROR_NO_PERMISSION},
        )
    )
    plan = plan_caps(select_gpus(backend, None, lambda _m: None), 250, strict=False, warn=print)
    with pytest.raises(GpuError, match=r"needs root.*nothing was changed"):
        apply_caps(plan, lambda _m: None)
    assert fake.devices[0].limit_mw == 350_000


def test_persistence_is_turned_on_where_off_and_a_refusal_is_a_warning() -> None:
    fake, backend = _fake_backend(
        FakeDevice(uuid=UUID_A),
        FakeDevice(uuid=UUID_B, persistence_supported=False),
    )
    seen, warn = _warnings()
    out = enable_persistence(select_gpus(backend, None, lambda _m: None), warn)
    assert [(before, after) for _, before, after in out] == [(False, True), (None, None)]
    assert fake.devices[0].persistence_mode == 1
    assert any("GPU 1" in w and "stays off" in w for w in seen)


# --- status --------------------------------------------------------------------------------


def test_status_reads_everything_and_tolerates_a_card_without_limits(tmp_path: Path) -> None:
    _, backend = _fake_backend(
        FakeDevice(uuid=UUID_A, limit_mw=290_000, persistence_mode=1),
        FakeDevice(uuid=UUID_B, power_managed=False),
    )
    a, b = read_gpu_status(backend)
    assert a.to_dict()["power_limit"] == {
        "min_w": 100.0,
        "default_w": 350.0,
        "max_w": 390.0,
        "current_w": 290.0,
        "differs_from_default": True,
        "error": None,
    }
    assert a.persistence_mode is True and a.locked_clocks.known is False
    assert a.to_dict()["now"]["sm_clock_mhz"] == 1800.0
    assert b.envelope is None and "no settable power limit" in (b.envelope_error or "")
    journal = read_journal_status(tmp_path, lambda _pid: False)
    text = render_status([a, b], [journal], None)
    assert "290 W in force (differs from the default)" in text
    assert "NVML cannot read clock locks" in text
    assert f"none ({tmp_path / 'journal.json'})" in text
    json.dumps([a.to_dict(), b.to_dict()], allow_nan=False)


def test_status_reports_a_killed_sweeps_journal(tmp_path: Path) -> None:
    (tmp_path / "journal.json").write_text(
        json.dumps(
            {
                "version": 1,
                "pid": 424242,
                "created_at": "2026-01-01T00:00:00Z",
                "backend": {"kind": "nvml"},
                "gpus": [{"uuid": UUID_A, "index": 0, "original_limit_w": 370}],
            }
        )
    )
    j = read_journal_status(tmp_path, lambda _pid: False)
    assert j.exists and j.pid == 424242 and j.sweep_running is False
    assert "powersweep restore" in render_status([], [j], None)


# --- a run's recommendation ----------------------------------------------------------------


def _run_with(
    tmp_path: Path, *, analysis: dict[str, Any] | None, run: dict[str, Any] | None
) -> Path:
    d = tmp_path / "run"
    d.mkdir()
    if analysis is not None:
        (d / "analysis.json").write_text(json.dumps(analysis))
    if run is not None:
        (d / "run.json").write_text(json.dumps(run))
    return d


RUN = {
    "schema_version": 1,
    "status": "complete",
    "gpus": [{"index": 0, "name": RTX3090, "uuid": UUID_A}],
}
ANALYSIS = {
    "schema_version": 1,
    "sweet_spot": {"cap_w": 290.0, "tps_per_w": 0.11, "tps": 30.0, "at_boundary": None},
    "near_peak": {"cap_w": 320.0, "tps_per_w": 0.1, "tps": 33.0},
    "recommendation": {"objective": "near-peak", "cap_w": 320.0, "tps_per_w": 0.1, "tps": 33.0},
}


def test_recommendation_follows_the_analysis_or_the_objective_asked(tmp_path: Path) -> None:
    d = _run_with(tmp_path, analysis=ANALYSIS, run=RUN)
    rec = read_recommendation(d)
    assert (rec.objective, rec.cap_w) == ("near-peak", 320.0)
    assert rec.gpus == (MeasuredGpu(0, RTX3090, UUID_A),)
    assert read_recommendation(d, "tps-per-w").cap_w == 290.0


@pytest.mark.parametrize(
    ("analysis", "run", "needle"),
    [
        (None, RUN, "no analysis.json: run `powersweep analyze"),
        (ANALYSIS, None, "no run.json"),
        ({**ANALYSIS, "sweet_spot": None, "recommendation": None}, RUN, "holds no tps-per-w"),
        (ANALYSIS, {**RUN, "observe_only": True}, "--observe-only"),
        (ANALYSIS, {**RUN, "gpus": []}, "lists no GPUs"),
        (
            # a sweep whose caps never bound: none saves energy, none is applied
            {
                **ANALYSIS,
                "power_cap_binds": {"binds": False, "draw_w": [114, 129], "caps_w": [400, 600]},
            },
            RUN,
            "no cap binds in .*: the card drew 114-129 W under caps of 400-600 W",
        ),
    ],
)
def test_a_run_without_a_usable_recommendation_is_refused(
    tmp_path: Path, analysis: dict[str, Any] | None, run: dict[str, Any] | None, needle: str
) -> None:
    d = _run_with(tmp_path, analysis=analysis, run=run)
    pattern = needle if ".*" in needle else needle.replace("(", r"\(")
    with pytest.raises(UsageError, match=pattern):
        read_recommendation(d, "tps-per-w" if "tps-per-w" in needle else None)


def test_not_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        read_recommendation(tmp_path / "nope")
