"""The collector held off for a capture: restored as it was, also when the capture raises."""

from __future__ import annotations

import gc

import pytest

from kernelarena.runtime.capture import collector_paused


def test_the_collector_is_off_inside_and_back_on_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # an inner pause leaves the outer one in force
    assert gc.isenabled()


def test_it_comes_back_on_when_the_capture_raises() -> None:
    with pytest.raises(RuntimeError, match="capture"), collector_paused():
        raise RuntimeError("capture failed")
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
