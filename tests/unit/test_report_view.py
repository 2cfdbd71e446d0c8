"""powersweep.report_view: the run in one screen (issue 47) for every axis, from the typed
analysis alone: the table of the points with their stated precision and status, the marks, the
answer line as the axis words it (none for a run that did not finish), the files written."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from powersweep.analysis.clock_result_types import ClockAnalysis, LockPoint, LockRow, Locks
from powersweep.analysis.result_types import (
    Answer,
    CapRow,
    Pick,
    PowerAnalysis,
    RunFacts,
    known,
)
from powersweep.analysis.undervolt_result_types import (
    MemoryAnswer,
    OffsetStep,
    UndervoltAnalysis,
)
from powersweep.analysis.undervolt_summary import headline as undervolt_headline
from powersweep.report import build_report
from powersweep.report_view import render_body, render_failed, render_paths, render_view
from powersweep.sim.synthetic_fleet import synthetic_fleet
from powersweep.sweep.axes import AXES
from tests.paths import PUBLISHED

RUN = RunFacts(gpu_name="NVIDIA GeForce RTX 3090", load_mode="decode-single", cooling="air")


def _cap(cap: float, tps: float | None, power: float | None, status: str = "ok") -> CapRow:
    tpw = tps / power if tps is not None and power else None
    return CapRow.from_json(dict(cap_w=cap, tps=tps, power_w=power, tps_per_w=tpw, status=status))


def _power(answer: Answer, run: RunFacts = RUN) -> PowerAnalysis:
    caps = [
        _cap(200.0, 20.0, 200.0),
        _cap(250.0, 28.0, 245.0),
        _cap(300.0, 31.0, 275.0, "outlier"),  # named, kept in the table, never picked
        _cap(350.0, 33.0, 300.0),
        _cap(400.0, None, None, "failed"),
    ]
    spot = Pick(
        cap_w=250.0,
        tps_per_w=28.0 / 245.0,
        tps=28.0,
        power_w=245.0,
        tied_caps=[250.0, 300.0, 350.0],
        tps_per_w_u95_pct={"200.0": 1.234, "250.0": 0.5, "350.0": 0.75},
    )
    return PowerAnalysis(run=run, caps=caps, answer=answer, sweet_spot=spot)


def _lines(text: str) -> list[str]:
    return text.splitlines()


def _table_row(text: str, point: str) -> list[str]:
    (row,) = [r for r in _lines(text) if r[1:].split()[:1] == [point]]
    return row.split()


def test_a_power_run_shows_each_cap_its_precision_and_status_and_the_answer() -> None:
    result = _power(Answer(kind="answer", points_usable=3))
    text = render_body(result, AXES["power"].headline(result))
    lines = _lines(text)
    assert lines[0] == "NVIDIA GeForce RTX 3090, decode-single, air: 5 caps"
    assert lines[1].split() == ["cap", "W", "TPS", "draw", "W", "TPS/W", "+-95%", "status"]
    assert _table_row(text, "200") == ["200", "20.0", "200", "0.1000", "1.23%", "ok"]
    assert _table_row(text, "250") == ["*", "250", "28.0", "245", "0.1143", "0.50%", "ok"]
    assert _table_row(text, "350") == ["~", "350", "33.0", "300", "0.1100", "0.75%", "ok"]
    # the outlier: its reading shown, named, unmarked though the noise ties it
    assert _table_row(text, "300") == ["300", "31.0", "275", "0.1127", "-", "outlier"]
    assert _table_row(text, "400") == ["400", "-", "-", "-", "-", "failed"]
    assert "* sweet spot  ~ tied with it (within noise)" in lines
    assert lines[-1] == "sweet spot: 250 W, 0.1143 TPS/W, 28.0 TPS"
    assert all(len(line) <= 80 for line in lines)


def test_an_interrupted_run_says_so_and_marks_no_answer() -> None:
    why = (
        "interrupted after 2 of 21 caps; `powersweep --resume "
        "/a/rather/long/path/to/powersweep-runs/20261206-104156-rtx-3090-decode-single` "
        "measures the rest"
    )
    run = RunFacts(gpu_name="NVIDIA GeForce RTX 3090", status="interrupted")
    result = _power(Answer(kind="none", why=why, points_usable=3), run)
    text = render_body(result, AXES["power"].headline(result))
    lines = _lines(text)
    assert lines[0] == "NVIDIA GeForce RTX 3090: 5 caps, run interrupted"
    assert not any(line[:1] in ("*", "~") for line in lines)  # nothing offered as the answer
    answer = text[text.index("no answer: ") :]
    assert answer.startswith("no answer: interrupted after 2 of 21 caps;")
    assert "best of the caps measured: 250 W" in answer and "(not an answer)" in answer
    assert "sweet spot:" not in text
    # the resume command stays on one line, to copy; every other line fits 80 columns
    command = [line for line in lines if "--resume" in line]
    assert command == [
        "`powersweep --resume /a/rather/long/path/to/powersweep-runs/"
        "20261206-104156-rtx-3090-decode-single`"
    ]
    assert all(len(line) <= 80 for line in lines if line not in command)


def test_a_boundary_is_named_in_the_legend() -> None:
    result = _power(Answer(kind="boundary", why="the lowest cap measured", points_usable=3))
    text = render_body(result, AXES["power"].headline(result))
    assert "* best cap (a boundary)" in text
    assert "best cap: 250 W" in text and "a boundary: the lowest cap measured" in text


def test_a_run_without_a_headline_gives_the_analysis_reason() -> None:
    result = PowerAnalysis(
        run=RUN,
        caps=[_cap(300.0, None, None, "failed")],
        answer=Answer(kind="none", why="only 0 usable caps: an answer needs at least 3"),
    )
    assert AXES["power"].headline(result) is None
    text = render_body(result, None)
    assert _lines(text)[-1] == "no answer: only 0 usable caps: an answer needs at least 3"


def _lock(sm: float, mem: float | None, tps: float, power: float, u95: float) -> LockPoint:
    return LockPoint.from_json(
        dict(
            sm_lock_mhz=sm,
            mem_lock_mhz=mem,
            tps=tps,
            power_w=power,
            tps_per_w=tps / power,
            tps_per_w_u95_pct=u95,
        )
    )


def test_a_clock_run_shows_its_locks_and_the_points_that_did_not_end_ok() -> None:
    points = [
        _lock(1500.0, 9001.0, 36.0, 230.0, 0.4),
        _lock(1200.0, 9001.0, 33.0, 200.0, 0.3),
        _lock(1200.0, 7001.0, 30.0, 190.0, 0.6),
    ]
    peak = replace(points[1], tied_points=[Locks(1200.0, 9001.0), Locks(1200.0, 7001.0)])
    rows = [
        LockRow.from_json(
            dict(sm_lock_mhz=1800.0, mem_lock_mhz=9001.0, status="failed", error="lost")
        ),
        # a point that failed once and was measured ok later is shown once, ok
        LockRow.from_json(dict(sm_lock_mhz=1500.0, mem_lock_mhz=9001.0, status="failed")),
        LockRow.from_json(
            dict(
                sm_lock_mhz=900.0,
                mem_lock_mhz=7001.0,
                tps=50.0,
                power_w=150.0,
                tps_per_w=1 / 3,
                status="outlier",
            )
        ),
    ]
    result = ClockAnalysis(
        axis="grid", run=RUN, points=points, rows=rows, peak=peak, answer=Answer(kind="answer")
    )
    text = render_body(result, AXES["grid"].headline(result))
    lines = _lines(text)
    assert lines[0].endswith(": 5 points")
    assert lines[1].split()[:2] == ["SM/mem", "MHz"]
    # by memory clock (fastest first), then SM clock upward
    assert [line[1:].split()[0] for line in lines[2:7]] == [
        "1200/9001", "1500/9001", "1800/9001", "900/7001", "1200/7001",
    ]  # fmt: skip
    assert _table_row(text, "1200/9001") == [
        "*",
        "1200/9001",
        "33.0",
        "200",
        "0.1650",
        "0.30%",
        "ok",
    ]
    assert _table_row(text, "1200/7001")[0] == "~"
    assert _table_row(text, "1500/9001")[-1] == "ok"
    assert _table_row(text, "1800/9001") == ["1800/9001", "-", "-", "-", "-", "failed"]
    assert _table_row(text, "900/7001") == ["900/7001", "50.0", "150", "0.3333", "-", "outlier"]
    assert lines[-1] == (
        "efficiency peak: SM 1200 MHz / mem 9001 MHz, 0.1650 TPS/W, 33.0 TPS, 200 W"
    )


def test_an_sm_clock_run_without_an_answer_marks_nothing() -> None:
    points = [_lock(1500.0, None, 36.0, 230.0, 0.4), _lock(1200.0, None, 33.0, 200.0, 0.3)]
    result = ClockAnalysis(
        axis="sm-clock",
        run=RUN,
        points=points,
        peak=points[1],
        answer=Answer(kind="none", why="only 2 usable points: an answer needs at least 3"),
    )
    text = render_body(result, AXES["sm-clock"].headline(result))
    assert _lines(text)[1].split()[:2] == ["SM", "MHz"]
    assert _table_row(text, "1200") == ["1200", "33.0", "200", "0.1650", "0.30%", "ok"]
    words = " ".join(text.split())
    assert "no answer: only 2 usable points" in words and "(not an answer)" in words


def _offset_step(offset: float, reason: str, status: str = "ok", **extra: float) -> OffsetStep:
    return OffsetStep.from_json(
        dict(
            sm_offset_mhz=offset,
            sm_lock_mhz=1485.0,
            cap_w=300.0,
            reason=reason,
            status=status,
            tps=36.0,
            power_w=250.0 - offset / 10,
            tps_per_w=36.0 / (250.0 - offset / 10),
            tps_per_w_u95_pct=0.4,
            **extra,  # type: ignore[arg-type]
        )
    )


def test_an_undervolt_search_shows_the_cap_each_step_and_the_soaked_answer() -> None:
    baseline = OffsetStep.from_json(dict(
        sm_offset_mhz=0.0, cap_w=300.0, reason="baseline", status="ok", tps=36.2,
        power_w=280.0, tps_per_w=36.2 / 280.0, tps_per_w_u95_pct=1.5,
    ))  # fmt: skip
    steps = [
        _offset_step(0.0, "reference"),
        _offset_step(60.0, "search"),
        _offset_step(120.0, "search"),
        _offset_step(150.0, "refine", "unstable"),
    ]
    soak = _offset_step(90.0, "soak")
    memory_step = _offset_step(90.0, "search", mem_offset_mhz=500.0)
    result = UndervoltAnalysis(
        run=RUN,
        sm_lock_mhz=1485.0,
        baseline=baseline,
        steps=steps,
        soaks=[soak],
        chosen=soak,
        memory=MemoryAnswer(steps=[memory_step]),
    )
    text = render_body(result, undervolt_headline(result))
    lines = _lines(text)
    assert lines[0].endswith(": 7 steps")
    assert lines[1].split()[:2] == ["offset", "MHz"]
    assert [line[1:].split()[0] for line in lines[2:9]] == [
        "300", "+0", "+60", "+120", "+150", "+90", "mem",
    ]  # fmt: skip
    assert _table_row(text, "300") == ["300", "W", "cap", "36.2", "280", "0.1293", "1.50%", "ok"]
    assert _table_row(text, "+150")[-2:] == ["0.40%", "unstable"] and "refine" in _table_row(
        text, "+150"
    )
    assert _table_row(text, "+90")[:3] == ["*", "+90", "soak"]
    assert "* the answer (soaked)" in lines
    assert lines[-1].startswith("undervolt: SM 1485 MHz +90 MHz offset")


def test_the_paths_name_the_run_and_summary_in_full_and_the_rest_from_the_run(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    charts = [run / "charts" / f"{n}.png" for n in ("efficiency", "power", "clocks", "timeline")]
    elsewhere = tmp_path / "else" / "latency.png"
    text = render_paths(run, [run / "analysis.json", run / "summary.md", *charts, elsewhere])
    lines = _lines(text)
    assert lines[:2] == [f"run:      {run}", f"summary:  {run / 'summary.md'}"]
    listed = " ".join(line[10:] for line in lines[2:]).split(", ")
    assert lines[2].startswith("files:    analysis.json, charts/efficiency.png")
    assert listed[-1] == str(elsewhere) and len(listed) == 6
    # a caps.csv given (analyze): its folder names the rest
    assert render_paths(run / "caps.csv", [run / "analysis.json"]).endswith(
        "files:    analysis.json"
    )


def test_a_run_with_nothing_to_analyse_says_why_and_what_it_wrote(tmp_path: Path) -> None:
    text = render_failed("every cap failed", tmp_path, [tmp_path / "summary.md"])
    assert _lines(text) == [
        "no answer: every cap failed",
        "",
        f"run:      {tmp_path}",
        f"summary:  {tmp_path / 'summary.md'}",
    ]


def test_a_dense_power_run_fits_a_screen(tmp_path: Path) -> None:
    (card,) = synthetic_fleet(tmp_path, "rtx3090-air", 1, step_w=10.0)
    report = build_report(card.run_dir, charts=False, write_analysis=False)
    assert isinstance(report.result, PowerAnalysis) and len(report.result.caps) >= 21
    paths = [card.run_dir / "analysis.json", card.run_dir / "summary.md"]
    text = render_view(report.result, report.headline, card.run_dir, paths)
    lines = _lines(text)
    assert len(lines) <= len(report.result.caps) + 12 <= 40
    assert report.headline is not None and report.headline in text
    assert all(len(line) <= 80 for line in lines if not line.startswith(("run:", "summary:")))
    assert "\x1b" not in text and text.isascii()


def test_an_unsoaked_answer_is_not_called_soaked_and_a_long_title_keeps_the_status() -> None:
    step = _offset_step(90.0, "search")
    run = RunFacts(
        gpu_name="NVIDIA GeForce RTX 4090 (simulated)",
        load_mode="decode-single",
        cooling="air",
        status="interrupted",
    )
    result = UndervoltAnalysis(run=run, steps=[_offset_step(0.0, "reference"), step], chosen=step)
    lines = _lines(render_body(result, undervolt_headline(result)))
    assert "* the answer" in lines and "* the answer (soaked)" not in lines
    assert len(lines[0]) <= 80 and lines[0].endswith("...: 2 steps, run interrupted")


def test_a_rig_of_several_cards_says_the_cap_is_per_card() -> None:
    result = _power(Answer(kind="answer"), RunFacts(gpu_name="NVIDIA GeForce RTX 3090", n_gpus=2))
    lines = _lines(render_body(result, AXES["power"].headline(result)))
    assert lines[0] == "NVIDIA GeForce RTX 3090: 5 caps, 2 GPUs"
    assert lines[1].split()[:2] == ["cap", "W/card"]


def test_a_published_bare_curve_shows_its_outlier_and_its_one_reading_precision(
    tmp_path: Path,
) -> None:
    # the R9700 decode curve: 290 W reads 19% above both neighbours (tests/data/published)
    source = PUBLISHED / "tanguille-r9700-qwen36-27b-sglang.csv"
    csv = tmp_path / "r9700.csv"
    csv.write_bytes(source.read_bytes())
    report = build_report(csv, charts=False, write_analysis=False)
    assert isinstance(report.result, PowerAnalysis)
    sweet = report.result.sweet_spot
    estimate = known(sweet.estimate) if sweet is not None else None
    assert estimate is not None and estimate.reading_u95_pct is not None
    u95 = f"{estimate.reading_u95_pct:.2f}%"
    text = render_view(report.result, report.headline, csv, [tmp_path / "out" / "summary.md"])
    assert _table_row(text, "290")[-2:] == [u95, "outlier"]
    starred = [line for line in _lines(text) if line.startswith("* ") and line[2:3] == " "]
    assert len(starred) == 1 and "290" not in starred[0]  # never the pick
    assert f"+-95%: one reading's, {sweet.noise_source}" in _lines(text)
    # a file not beside the csv is named in full
    assert _lines(text)[-1] == f"summary:  {tmp_path / 'out' / 'summary.md'}"
