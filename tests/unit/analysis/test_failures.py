"""powersweep.analysis.failures: a failed request's cause in words (the client's own wording and
httpx's bare exception names alike), which failures another fault kind counts, and the most
common causes with their counts."""

from __future__ import annotations

import pytest

from powersweep.analysis.failures import cause_examples, counted_elsewhere, failure_cause


@pytest.mark.parametrize(
    ("error", "cause"),
    [
        ("HTTP 500: internal server error", "HTTP 500 from the server"),
        ("HTTP 404", "HTTP 404 from the server"),
        ("ReadError:", "connection reset by the server"),
        ("[Errno 104] Connection reset by peer", "connection reset by the server"),
        ("RemoteProtocolError: peer closed", "the server closed the connection mid-response"),
        ("ReadTimeout", "read timeout (the server went silent)"),
        ("ConnectTimeout: no answer", "connect timeout (the server did not answer)"),
        ("ConnectError: [Errno 111] Connection refused", "cannot connect to the server"),
        ("WriteError: broken pipe", "the request could not be sent"),
        ("PoolTimeout", "no free connection to the server in time"),
        ("too slow for the window", "no token before the deadline (too slow for the window)"),
        ("the server generated no tokens", "the server generated no countable tokens"),
        ("an event-stream line of more than 65536 bytes", "an event-stream line that never ended"),
        ("stream ended without sending any event", "the server closed the stream without an event"),
        ("DecodingError in body", "an answer that could not be decoded"),
        ("the request timed out", "timed out"),
    ],
)
def test_each_known_error_reads_as_its_cause(error: str, cause: str) -> None:
    assert failure_cause(error) == cause


def test_an_http_status_wins_over_words_that_name_another_cause() -> None:
    # "HTTP 503 ... timeout": the status line is the server's own answer
    assert failure_cause("HTTP 503 upstream timeout") == "HTTP 503 from the server"
    # the status must start the text: an HTTP code quoted later is no status line
    assert failure_cause("proxy said HTTP 502 then read timeout") == (
        "read timeout (the server went silent)"
    )


def test_no_error_text_and_unknown_text_kept_shortened_with_whitespace_folded() -> None:
    assert failure_cause(None) == "failed without an error message"
    assert failure_cause("   \n\t ") == "failed without an error message"
    assert failure_cause("weird\n  thing") == "weird thing"
    long = "x" * 200
    assert failure_cause(long) == "x" * 80


@pytest.mark.parametrize(
    ("error", "counted"),
    [
        ("HTTP 429 Too Many Requests", True),
        ("HTTP 503", True),
        ("HTTP 500", False),
        ("request too slow for the window", True),
        ("no stream carried tokens the client could count", True),
        ("an event-stream line of more than 1048576 bytes", True),
        ("ReadTimeout", False),
        (None, False),
        ("", False),
    ],
)
def test_counted_elsewhere_names_the_kinds_the_sweep_counts_on_their_own(
    error: str | None, counted: bool
) -> None:
    assert counted_elsewhere(error) is counted


def test_cause_examples_are_the_most_common_first_with_counts() -> None:
    errors = ["ReadTimeout", "HTTP 500", "read timeout", None, "ReadError:", "HTTP 500", "x"]
    # 2 read timeouts, 2 HTTP 500s (first seen order breaks the tie), then the others
    assert cause_examples(errors) == [
        "read timeout (the server went silent) (x2)",
        "HTTP 500 from the server (x2)",
        "failed without an error message (x1)",
    ]
    assert cause_examples(errors, limit=1) == ["read timeout (the server went silent) (x2)"]
    assert cause_examples([]) == []
