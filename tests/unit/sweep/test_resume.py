"""``--resume`` (``sweep/resume.py``): the options of an interrupted run read back from its
``run.json`` (what is given now wins where it must), the same GPUs checked, and the caps or clock
points still to measure, with the last status of each cap done."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from powersweep.errors import UsageError
from powersweep.runformat import SCHEMA_VERSION
from powersweep.sweep.options import ServerOptions, SweepOptions
from powersweep.sweep.planning.points import SweepPoint
from powersweep.sweep.records.writer import RunWriter
from powersweep.sweep.resume import prepare_resume, resume_options
from tests.fakes.fake_gpu import FakeGpu


def _interrupted_run(tmp_path: Path, **meta: Any) -> Path:
    writer = RunWriter(tmp_path / "runs", ["NVIDIA GeForce RTX 3090"], "decode-single")
    recorded = SweepOptions(server=ServerOptions(url="http://10.0.0.5:8000", model="m")).recorded()
    base: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "status": "interrupted",
        "options": {**recorded, "step_size_w": 20.0},
        "gpus": [{"index": 0, "uuid": "GPU-fake-0"}, {"index": 1, "uuid": "GPU-fake-1"}],
        "caps_planned": [350.0, 300.0, 250.0, 200.0],
        "caps_done": [350.0, 300.0],
    }
    writer.write_run_json({**base, **meta})
    return writer.path


def _given(tmp_path: Path, **server: Any) -> SweepOptions:
    options = SweepOptions(server=ServerOptions(**server))
    return dataclasses.replace(
        options,
        safety=dataclasses.replace(
            options.safety, state_dir=tmp_path / "state", force=True, dry_run=True
        ),
    )


def test_the_runs_options_come_back_with_what_is_given_now(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    options, meta = resume_options(run, _given(tmp_path, api_key="secret", url="http://h:9"))
    assert meta["caps_done"] == [350.0, 300.0]
    assert options.points.step_size_w == 20.0
    assert tuple(options.cards.gpus or ()) == (0, 1) and not options.cards.all_gpus
    assert (options.output.out, options.output.resume) == (run.parent, run)
    assert (options.server.url, options.server.model, options.server.api_key) == (
        "http://h:9",
        "m",
        "secret",
    )
    assert options.safety.state_dir == tmp_path / "state"
    assert options.safety.force and not options.safety.dry_run


def test_without_a_url_given_the_runs_own_is_used(tmp_path: Path) -> None:
    options, _ = resume_options(_interrupted_run(tmp_path), _given(tmp_path))
    assert options.server.url == "http://10.0.0.5:8000" and options.server.api_key is None


def _run_json_with(tmp_path: Path, text: str) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(text)
    return run


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "cannot read"),
        ("[]", "is not a powersweep run.json"),
        ('{"options": 3}', "is not a powersweep run.json"),
        ('{"options": {}, "schema_version": 99}', "has schema_version 99; this powersweep knows"),
        ('{"options": {}}', "has schema_version None"),
        (
            json.dumps({"options": {"cooling": "nitrogen"}, "schema_version": 1}),
            "has unusable options ('nitrogen' is not a valid Cooling)",
        ),
    ],
)
def test_a_file_that_is_no_resumable_run_is_one_usage_error(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UsageError) as info:
        resume_options(_run_json_with(tmp_path, text), SweepOptions())
    assert str(info.value).startswith("--resume: ") and message in str(info.value)


def test_a_folder_without_a_run_and_a_complete_run_are_refused(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"is not a run directory \(no run.json\)$"):
        resume_options(tmp_path, SweepOptions())
    with pytest.raises(UsageError, match=r"is complete; nothing to resume$"):
        resume_options(_interrupted_run(tmp_path, status="complete"), SweepOptions())


def _prepare_resume(tmp_path: Path, run: Path, gpus: list[FakeGpu]) -> Any:
    options, meta = resume_options(run, _given(tmp_path))
    return prepare_resume(options, meta, gpus)  # type: ignore[arg-type]


def test_the_caps_left_and_the_last_status_of_each_cap_done(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    (run / "caps.csv").write_text(
        "cap_w,status\n350,failed\n300,\n350,ok\n250,ok\nnot a cap,failed\n"
    )
    state = _prepare_resume(tmp_path, run, [FakeGpu(0), FakeGpu(1)])
    assert state.caps_left == [250.0, 200.0] and state.caps_done == [350.0, 300.0]
    # the last row of each cap run.json says is done (250 is not: it is measured again)
    assert state.cap_status == {350.0: "ok", 300.0: "ok"}
    assert state.writer.path == run and state.points_left == []


def test_another_gpu_set_is_refused(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path)
    with pytest.raises(UsageError) as info:
        _prepare_resume(tmp_path, run, [FakeGpu(1), FakeGpu(0)])
    assert str(info.value) == (
        "--resume: the run was on GPUs GPU-fake-0, GPU-fake-1, this sweep would use GPU-fake-1, "
        "GPU-fake-0; resume needs the same GPU set"
    )


def test_a_run_with_every_cap_done_has_nothing_to_resume(tmp_path: Path) -> None:
    run = _interrupted_run(tmp_path, caps_done=[350, 300, 250, 200])
    with pytest.raises(UsageError, match=r"every planned cap of .* is done$"):
        _prepare_resume(tmp_path, run, [FakeGpu(0), FakeGpu(1)])


def test_a_clock_run_resumes_at_its_points_left(tmp_path: Path) -> None:
    planned = [SweepPoint(300.0, sm, 9501.0) for sm in (1500.0, 1200.0, 900.0)]
    run = _interrupted_run(
        tmp_path,
        caps_planned=[300.0],
        caps_done=[],
        points_planned=[p.to_dict() for p in planned],
        points_done=[planned[0].to_dict()],
    )
    state = _prepare_resume(tmp_path, run, [FakeGpu(0), FakeGpu(1)])
    assert state.points_left == planned[1:] and state.points_done == planned[:1]
    assert state.caps_left == [300.0] and state.caps_done == []
    all_done = _interrupted_run(
        tmp_path,
        points_planned=[p.to_dict() for p in planned],
        points_done=[p.to_dict() for p in planned],
    )
    with pytest.raises(UsageError, match=r"every planned point of .* is done$"):
        _prepare_resume(tmp_path, all_done, [FakeGpu(0), FakeGpu(1)])
