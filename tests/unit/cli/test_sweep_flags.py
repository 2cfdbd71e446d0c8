"""The sweep's own option parsers (``--concurrency``, ``--gpu``: powersweep.sweep.options, where
the flags are declared), through the command line where a value reaches them."""

from __future__ import annotations

import pytest

from powersweep.cli import main
from powersweep.errors import UsageError
from powersweep.sweep.options import is_all, parse_concurrency, parse_gpus


@pytest.mark.parametrize(
    ("text", "streams"), [(None, None), ("auto", None), (" AUTO ", None), ("1", 1), ("16", 16)]
)
def test_concurrency_is_a_number_of_streams_or_auto(text: str | None, streams: int | None) -> None:
    assert parse_concurrency(text) == streams


@pytest.mark.parametrize("text", ["0", "-2", "four", "2.5", "", "1,2"])
def test_other_concurrency_is_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match="--concurrency takes a number of streams or auto, not"):
        parse_concurrency(text)


@pytest.mark.parametrize(("text", "gpus"), [(None, None), ("0", (0,)), (" 0 , 2,1", (0, 2, 1))])
def test_gpus_are_indices(text: str | None, gpus: tuple[int, ...] | None) -> None:
    assert parse_gpus(text) == gpus


@pytest.mark.parametrize("text", ["", "x", "0,", "-1", "0;1", "all"])
def test_other_gpus_are_a_usage_error(text: str) -> None:
    with pytest.raises(UsageError, match=r"--gpu takes GPU indices like 0 or 0,1 \(or all\), not"):
        parse_gpus(text)


def test_all_means_every_gpu() -> None:
    assert is_all("all") and is_all(" ALL ")
    assert not is_all(None) and not is_all("0") and not is_all("al")


@pytest.mark.parametrize("parse", [parse_concurrency, parse_gpus])
def test_a_superscript_digit_is_a_usage_error(parse: object) -> None:
    with pytest.raises(UsageError):
        parse("²")  # type: ignore[operator]


def test_a_bad_value_on_the_command_line_is_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code = main(["--simulate", "rtx3090-air", "--gpu", "0,x"])
    out, err = capsys.readouterr()
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        "error: --gpu takes GPU indices like 0 or 0,1 (or all), not '0,x'"
    ]


def test_a_bad_serving_gpu_list_names_its_own_option(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--simulate", "rtx3090-air+rtx3090-air", "--sim-serving-gpus", "0,x"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines()[-1].startswith("error: --sim-serving-gpus ")
