"""How honest a finished sweep can be (``sweep/verdict.py``): its status from its caps' statuses,
and the faults its requests met, by kind, with counts and a few examples."""

from __future__ import annotations

from typing import Any

import pytest

from powersweep.runformat import (
    WARN_CUT_BY_RESET,
    WARN_IGNORED_MAX_TOKENS,
    WARN_SERVER_BUSY,
    WARN_USAGE_UNTRUSTED,
)
from powersweep.sweep.loads.base import TOO_SLOW
from powersweep.sweep.server.request import ERR_NO_COUNTABLE_TOKENS
from powersweep.sweep.server.sse import MAX_LINE_BYTES
from powersweep.sweep.verdict import MIN_OK_CAPS, FaultLog, judge
from tests.fakes.fake_chat import request_result


@pytest.mark.parametrize(
    ("statuses", "status", "reason"),
    [
        ([], "failed", "no cap was measured"),
        (["rejected", "rejected"], "failed", "no cap was measured successfully (all rejected)"),
        (
            ["failed", "suspect", "rejected"],
            "failed",
            "no cap was measured successfully (1 failed, 1 suspect)",
        ),
        (
            ["ok", "failed"],
            "partial",
            "only 1 of 2 caps were measured successfully (1 failed): too few to answer",
        ),
        (
            ["ok"] * 3 + ["failed"] * 4,
            "partial",
            "only 3 of 7 caps were measured successfully (4 failed): too few to answer",
        ),
        (["ok", "ok", "rejected"], "complete", None),  # every measurable cap answered
        (["ok"] * 3 + ["failed"] * 3, "complete", None),
        (["ok"] * 3 + ["suspect"], "complete", None),
    ],
)
def test_a_run_is_complete_when_enough_caps_answer(
    statuses: list[str], status: str, reason: str | None
) -> None:
    assert judge(statuses) == (status, reason)
    assert judge(iter(statuses)) == (status, reason)  # any iterable


def test_fewer_caps_planned_than_the_minimum_need_all_of_them() -> None:
    assert MIN_OK_CAPS == 3
    assert judge(["ok"]) == ("complete", None)
    assert judge(["ok", "ok", "ok", "ok", "failed"])[0] == "complete"
    assert judge(["ok", "ok", "failed", "failed", "failed"])[0] == "partial"


def test_an_undervolt_searchs_unstable_step_is_its_answer_not_a_failure() -> None:
    # the baseline, the reference, and a first step that was already unstable
    assert judge(["ok", "ok", "unstable"]) == ("complete", None)
    assert judge(["ok", "ok", "ok", "ok", "unstable", "ok"]) == ("complete", None)
    status, why = judge(["ok", "failed", "unstable"])
    assert status == "partial" and why is not None and "1 failed" in why


def test_a_fault_kind_counts_every_one_and_keeps_three_different_examples() -> None:
    log = FaultLog()
    for detail in ("a", "b", "a", "c", "d"):
        log.add("stall", detail)
    log.add("other", "x")
    assert log.to_list() == [
        {"kind": "stall", "count": 5, "examples": ["a", "b", "c"]},
        {"kind": "other", "count": 1, "examples": ["x"]},
    ]
    # the list is a copy: changing it changes nothing in the log
    log.to_list()[0]["examples"].append("z")
    assert log.to_list()[0]["examples"] == ["a", "b", "c"]


def _request_fault_kinds(*results: Any) -> dict[str, int]:
    log = FaultLog()
    log.requests(results)
    return {f["kind"]: f["count"] for f in log.to_list()}


def test_warnings_the_client_recognised_are_counted_by_kind() -> None:
    cut = dict(finish="deadline", warnings=(WARN_IGNORED_MAX_TOKENS,), chunks=120)
    assert _request_fault_kinds(
        request_result("narr", **cut),  # type: ignore[arg-type]
        request_result("warmup", **cut),  # type: ignore[arg-type]  # a warm-up's cut is by design
        request_result("narr", finish="deadline"),  # cut at the window's end: by design
        request_result("narr", warnings=(WARN_CUT_BY_RESET,)),
        request_result("code", warnings=(f"{WARN_USAGE_UNTRUSTED}: 900 tokens in 20 bytes",)),
        request_result("code", warnings=(WARN_SERVER_BUSY,)),
    ) == {"cut_at_deadline": 1, "cut_by_reset": 1, "usage_untrusted": 1, "server_busy": 1}


def test_a_cut_past_max_tokens_and_a_reset_say_how_many_chunks_came() -> None:
    log = FaultLog()
    log.requests(
        [
            request_result(
                "narr", finish="deadline", chunks=120, warnings=(WARN_IGNORED_MAX_TOKENS,)
            ),
            request_result("code", chunks=7, warnings=(WARN_CUT_BY_RESET,)),
        ]
    )
    cut, reset = log.to_list()
    assert cut["examples"] == [
        "a narr request ran past its max_tokens (the server ignores it) and was cut at its "
        "window's end after 120 token chunks"
    ]
    assert reset["examples"][0].startswith("a code request was reset by the server after 7 token")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        ("HTTP 429: too many requests", "server_busy"),
        ("HTTP 503: overloaded", "server_busy"),
        (f"{ERR_NO_COUNTABLE_TOKENS} (no content in 5 events)", "no_countable_tokens"),
        (f"an SSE line of more than {MAX_LINE_BYTES} bytes", "line_too_long"),
        (f"no token arrived within 30 s: the server is {TOO_SLOW} (or stuck)", "too_slow"),
    ],
)
def test_failed_requests_of_a_known_kind_are_counted_under_it(error: str, kind: str) -> None:
    failed = request_result(ok=False, error=error, tokens=0, chunks=0, completion=None)
    assert _request_fault_kinds(failed) == {kind: 1}


def test_other_failed_requests_are_counted_by_their_commonest_causes_last() -> None:
    log = FaultLog()
    log.add("stall", "x")
    errors = ["HTTP 500: boom", "HTTP 500: bang", "HTTP 502: gateway", ""]
    log.requests(
        [request_result(ok=False, error=e, tokens=0, chunks=0, completion=None) for e in errors]
    )
    stall, failed = log.to_list()
    assert stall["kind"] == "stall"
    assert failed == {
        "kind": "request_failed",
        "count": 4,
        "examples": [
            "HTTP 500 from the server (x2)",
            "HTTP 502 from the server (x1)",
            "failed without an error message (x1)",
        ],
    }


def test_requests_that_went_well_are_no_fault() -> None:
    assert _request_fault_kinds(request_result(), request_result("code", finish="stop")) == {}
