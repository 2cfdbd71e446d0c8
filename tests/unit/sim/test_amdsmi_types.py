"""powersweep.sim.amdsmi_types: the fake amdsmi's errors as amdsmi raises them. A library error
keeps its status code (made positive, as amdsmi does) and its text, spans two lines in ``str``,
gives its short or detailed info, and falls back to the unknown error's text; a parameter error
says what it got and expected. (Names and values against the installed amdsmi are checked in
``test_amdsmi_api.py``.)"""

from __future__ import annotations

import pytest

from powersweep.sim.amdsmi_types import (
    AMDSMI_STATUS_INVAL,
    AMDSMI_STATUS_NO_PERM,
    AMDSMI_STATUS_NOT_SUPPORTED,
    AmdSmiClkType,
    AmdSmiException,
    AmdSmiLibraryException,
    AmdSmiParameterException,
    AmdSmiTemperatureType,
)


def test_a_library_error_keeps_its_code_and_text() -> None:
    exc = AmdSmiLibraryException(AMDSMI_STATUS_NO_PERM)
    assert isinstance(exc, AmdSmiException)
    assert exc.err_code == exc.get_error_code() == 10
    assert exc.err_info == "AMDSMI_STATUS_NO_PERM - Permission Denied"
    assert str(exc) == "Error code:\n\t10 | AMDSMI_STATUS_NO_PERM - Permission Denied"


def test_a_negative_status_is_made_positive() -> None:
    exc = AmdSmiLibraryException(-AMDSMI_STATUS_NOT_SUPPORTED)
    assert exc.err_code == AMDSMI_STATUS_NOT_SUPPORTED
    assert exc.get_error_info() == "AMDSMI_STATUS_NOT_SUPPORTED - Feature not supported"


def test_the_short_info_is_the_status_name() -> None:
    exc = AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    assert exc.get_error_info(detailed=False) == "AMDSMI_STATUS_INVAL"
    assert exc.get_error_info(detailed=True) == "AMDSMI_STATUS_INVAL - Invalid parameters"


def test_an_unlisted_status_reads_as_an_unknown_error() -> None:
    exc = AmdSmiLibraryException(12345)
    assert exc.err_code == 12345
    assert exc.err_info == "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"


def test_a_parameter_error_names_what_it_got_and_expected() -> None:
    exc = AmdSmiParameterException("x", int)
    assert isinstance(exc, AmdSmiException) and exc.err_code is None
    assert str(exc) == "Invalid parameter: <class 'str'>, expected <class 'int'>"
    assert str(AmdSmiParameterException(1, int, "handle is not a processor")) == (
        "handle is not a processor"
    )


def test_enum_aliases_share_their_values() -> None:
    assert AmdSmiClkType.GFX is AmdSmiClkType.SYS and AmdSmiClkType.MEM == 4
    assert AmdSmiTemperatureType.JUNCTION is AmdSmiTemperatureType.HOTSPOT


def test_library_errors_raise_and_catch_as_amdsmis() -> None:
    with pytest.raises(AmdSmiException) as caught:
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    assert caught.value.err_code == AMDSMI_STATUS_INVAL  # type: ignore[attr-defined]
