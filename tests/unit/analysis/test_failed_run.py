"""powersweep.analysis.failed_run: the markdown account of a run with no usable point, written
from run.json, caps.csv and requests.csv as they are: why, the cards restored, each point's
status, the faults, failed and reset requests by cause, and notes on files it could not read."""

from __future__ import annotations

import json
from pathlib import Path

from powersweep.analysis.failed_run import failed_run_summary

WHY = "no cap finished with status ok"


def test_a_bare_directory_still_gets_a_summary(tmp_path: Path) -> None:
    assert failed_run_summary(tmp_path, WHY) == (
        "# powersweep: unknown status, no usable point\n"
        "\n"
        "**No recommendation**: no cap finished with status ok\n"
        "\n"
        "No point was written to caps.csv.\n"
    )


def test_a_failed_run_is_told_in_full(tmp_path: Path) -> None:
    run = {
        "status": "failed",
        "error": "server  went\naway | twice",
        "restored": [
            {"gpu_index": 0, "ok": True, "limit_w": 350},
            {"gpu_index": 1, "ok": False, "limit_w": 350.5},
            {"gpu_index": 2, "ok": True},
            "junk",
        ],
        "faults": [
            {"kind": "request_failed", "count": 4, "examples": ["HTTP 500", "read timeout"]},
            {"kind": "server_busy", "count": 1},
        ],
    }
    (tmp_path / "run.json").write_text(json.dumps(run))
    (tmp_path / "caps.csv").write_text(
        "cap_w,narr_tps,power_w,status,reason\n300,,,failed,\n250,,,failed|bad,retry\n"
    )
    (tmp_path / "requests.csv").write_text(
        "cap_w,prompt_kind,ok,error,warnings\n"
        "300,narr,false,HTTP 500,\n"
        "300,narr,False,HTTP 500,\n"
        "300,code,0,,\n"
        "250,narr,true,,cut_by_reset\n"
    )
    text = failed_run_summary(tmp_path, WHY)
    assert text == (
        "# powersweep: failed, no usable point\n"
        "\n"
        "**No recommendation**: no cap finished with status ok\n"
        "\n"
        "The sweep ended with: server went away \\| twice\n"
        "\n"
        "### Cards\n"
        "\n"
        "- GPU 0: power limit restored to 350 W\n"
        "- GPU 1: power limit **NOT restored** to 350.5 W\n"
        "- GPU 2: restored to\n"
        "\n"
        "### Points\n"
        "\n"
        "| cap_w | status | reason |\n"
        "|---|---|---|\n"
        "| 300 | failed |  |\n"
        "| 250 | failed\\|bad | retry |\n"
        "\n"
        "### Faults\n"
        "\n"
        "- **request_failed** x4: e.g. HTTP 500; read timeout\n"
        "- **server_busy** x1\n"
        "\n"
        "### Requests\n"
        "\n"
        "- 1 of 4 requests were reset by the server mid-stream (their tokens counted up to the "
        "reset)\n"
        "- 3 of 4 requests failed:\n"
        "  - 2 x narr: HTTP 500\n"
        "  - 1 x code: no reason given\n"
    )


def test_the_error_is_not_repeated_when_it_is_the_reason(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text(json.dumps({"status": "failed", "error": WHY}))
    assert "The sweep ended with" not in failed_run_summary(tmp_path, WHY)


def test_many_failure_causes_are_cut_at_eight(tmp_path: Path) -> None:
    rows = "".join(f"300,narr,false,error {k}\n" for k in range(11))
    (tmp_path / "requests.csv").write_text("cap_w,prompt_kind,ok,error\n" + rows)
    text = failed_run_summary(tmp_path, WHY)
    assert "- 11 of 11 requests failed:" in text
    assert text.count("  - 1 x narr: error") == 8
    assert text.endswith("  - and 3 other causes\n")


def test_unreadable_files_become_notes_not_errors(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("{broken")
    (tmp_path / "caps.csv").write_bytes(b"PK\x03\x04zip")
    (tmp_path / "requests.csv").write_text("")
    text = failed_run_summary(tmp_path, WHY)
    assert text.startswith("# powersweep: unknown status, no usable point\n")
    assert "No point was written to caps.csv." in text
    notes = [line for line in text.splitlines() if line.startswith("- note: ")]
    assert notes == [
        f"- note: {tmp_path / 'caps.csv'}: a zip archive (an Excel .xlsx or ODS workbook?); "
        "export the sheet as CSV",
        f"- note: {tmp_path / 'requests.csv'}: empty file",
    ]


def test_a_run_json_that_is_not_an_object_counts_as_none(tmp_path: Path) -> None:
    (tmp_path / "run.json").write_text("[1, 2]")
    assert failed_run_summary(tmp_path, WHY).startswith("# powersweep: unknown status")
