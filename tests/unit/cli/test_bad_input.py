"""Bad input of every kind ends in one ``error: ...`` line and a non-zero exit, no traceback.

Each row: the arguments (``{tmp}`` is a scratch directory with prepared files, ``{html}`` /
``{hang}`` / ``{down}`` are local server URLs) and a word the error line must contain.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from powersweep.cli import main

SIM = ("--simulate", "rtx3090-air")

CASES: list[tuple[str, list[str], str]] = [
    ("unknown cooling", ["--cooling", "liquid", *SIM], "--cooling"),
    ("unknown load mode", ["--load-mode", "burst", *SIM], "--load-mode"),
    ("unknown profile", ["--simulate", "rtx9090"], "unknown simulation profile"),
    ("unknown profile in a pair", ["--simulate", "rtx3090-air+nope"], "profile"),
    ("caps not numbers", ["--caps", "abc", *SIM], "--caps"),
    ("negative cap", ["--caps", "-5", *SIM], "--caps"),
    ("empty caps", ["--caps", ",", *SIM], "--caps"),
    ("zero step", ["--step-size", "0", *SIM], "--step-size"),
    ("negative settle", ["--settle-seconds", "-1", *SIM], "--settle-seconds"),
    ("zero window", ["--target-cap-seconds", "0", *SIM], "--target-cap-seconds"),
    ("bad gpu list", ["--gpu", "0,x", *SIM], "--gpu"),
    ("gpu out of range", ["--gpu", "2", *SIM], "no GPU 2"),
    ("max failed caps 0", ["--max-failed-caps", "0", *SIM], "--max-failed-caps"),
    ("time scale without sim", ["--time-scale", "3"], "--simulate"),
    ("seed without sim", ["--seed", "3"], "--simulate"),
    ("sim option without sim", ["--sim-rejects-below", "300"], "--simulate"),
    ("sim http error not an error", ["--sim-http-error", "200", *SIM], "400-599"),
    ("pace without sim", ["--sim-pace", "10"], "--sim-pace works only with --simulate"),
    ("pace and time scale", ["--sim-pace", "10", "--time-scale", "5", *SIM], "--sim-pace"),
    ("pace not positive", ["--sim-pace", "0", *SIM], "--sim-pace must be more than 0.01"),
    # issue 46: a first round longer than a point's windows stopped at the maximum unsaid
    (
        "a minimum past the target",
        ["--min-cap-seconds", "8", "--target-cap-seconds", "4", *SIM],
        "--min-cap-seconds 8 is more than --target-cap-seconds 4",
    ),
    # issue 46: 1e-300 hung in the server's discovery, before the plan's time bound
    ("a pace past any bound", ["--sim-pace", "1e-300", *SIM], "--sim-pace must be more than 0.01"),
    ("a tiny time scale", ["--time-scale", "1e-300", *SIM], "--time-scale must be more than 0.01"),
    # one bound for the run and its dry run
    ("a plan paced past a day", ["--sim-pace", "0.001", *SIM], "--sim-pace must be more than 0.01"),
    (
        "a paced dry run past a day",
        ["--dry-run", "--sim-pace", "0.001", *SIM],
        "--sim-pace must be more than 0.01",
    ),
    ("observe-only with caps", ["--observe-only", "--caps", "300", *SIM], "--observe-only"),
    ("dry-run with observe-only", ["--dry-run", "--observe-only", *SIM], "exclude"),
    ("unknown option", ["--frobnicate"], "no such option"),
    ("option without value", ["--caps"], "requires an argument"),
    ("not an http url", [*SIM, "--url", "ftp://x"], "not an http"),
    ("server down", [*SIM, "--url", "{down}"], "connection refused"),
    ("server answers html", [*SIM, "--url", "{html}"], "not an OpenAI-compatible server"),
    ("server hangs", [*SIM, "--url", "{hang}"], "no answer"),
    ("resume a missing dir", ["--resume", "{tmp}/nope"], "not a run directory"),
    ("resume a complete run", ["--resume", "{tmp}/complete"], "complete"),
    ("resume a newer schema", ["--resume", "{tmp}/newer"], "schema_version"),
    ("restore a damaged journal", ["restore", "--state-dir", "{tmp}/badjournal"], "damaged"),
    ("analyze a missing file", ["analyze", "{tmp}/missing.csv"], ""),
    ("analyze an empty csv", ["analyze", "{tmp}/empty.csv"], ""),
    ("analyze a csv without columns", ["analyze", "{tmp}/nocols.csv"], "cap_w"),
    ("analyze a newer run", ["analyze", "{tmp}/newer"], "newer"),
    ("analyze an empty dir", ["analyze", "{tmp}/emptydir"], ""),
    ("plot text values", ["plot", "{tmp}/text.csv"], ""),
    ("plot bad format", ["plot", "{tmp}/good.csv", "--format", "gif"], "--format"),
    ("compare a malformed csv", ["compare", "{tmp}/text.csv"], ""),
    ("compare bad axis", ["compare", "{tmp}/good.csv", "--x", "volts"], "--x"),
    ("import an empty file", ["import", "{tmp}/empty.md"], ""),
    ("import without a table", ["import", "{tmp}/prose.md"], ""),
]


class _Html(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html><body>router login</body></html>"
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    html = ThreadingHTTPServer(("127.0.0.1", 0), _Html)
    threading.Thread(target=html.serve_forever, daemon=True).start()
    hang = socket.socket()
    hang.bind(("127.0.0.1", 0))
    hang.listen(8)  # accepts (the kernel does) and never answers
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    down_port = closed.getsockname()[1]
    closed.close()
    try:
        yield {
            "html": f"http://127.0.0.1:{html.server_address[1]}",
            "hang": f"http://127.0.0.1:{hang.getsockname()[1]}",
            "down": f"http://127.0.0.1:{down_port}",
        }
    finally:
        html.shutdown()
        hang.close()


def _prepare(tmp: Path) -> None:
    (tmp / "empty.csv").write_text("")
    (tmp / "nocols.csv").write_text("a,b\n1,2\n")
    (tmp / "text.csv").write_text("cap_w,power_w,narr_tps\nabc,def,ghi\n")
    (tmp / "good.csv").write_text("cap_w,power_w,narr_tps\n200,199,20\n250,240,26\n300,280,30\n")
    (tmp / "empty.md").write_text("")
    (tmp / "prose.md").write_text("# My results\n\nIt was fast.\n")
    (tmp / "emptydir").mkdir()
    for name, meta in {
        "complete": {"schema_version": 1, "status": "complete", "options": {}},
        "newer": {"schema_version": 99, "status": "interrupted", "options": {}},
    }.items():
        (tmp / name).mkdir()
        (tmp / name / "run.json").write_text(json.dumps(meta))
        (tmp / name / "caps.csv").write_text((tmp / "good.csv").read_text())
    (tmp / "badjournal").mkdir()
    (tmp / "badjournal" / "journal.json").write_text("{not json")


@pytest.mark.parametrize(("label", "args", "needle"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_error_line(
    label: str,
    args: list[str],
    needle: str,
    tmp_path: Path,
    servers: dict[str, str],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    _prepare(tmp_path)
    argv = [a.format(tmp=tmp_path, **servers) for a in args]
    if argv[0] not in ("analyze", "plot", "compare", "import", "restore"):
        argv = ["--out", str(tmp_path / "runs"), "--quiet", *argv]
    code = main(argv)
    out, err = capsys.readouterr()
    assert code != 0, label
    lines = err.strip().splitlines()
    assert lines and lines[-1].startswith("error: "), err
    assert needle.lower() in lines[-1].lower(), lines[-1]
    assert "Traceback" not in err + out
    # nothing was measured
    assert not list((tmp_path / "runs").glob("*/caps.csv"))


def test_table_has_at_least_thirty_cases() -> None:
    assert len(CASES) >= 30


def test_caps_all_outside_the_envelope_are_clamped_not_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POWERSWEEP_STATE_DIR", str(tmp_path / "state"))
    code = main([*SIM, "--caps", "10,20,5000", "--dry-run"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "cap 10 W is outside the envelope 100-390 W; using 100 W" in err
    assert "cap 5000 W is outside the envelope 100-390 W; using 390 W" in err
    assert "caps (2, W per GPU): 390, 100" in out
