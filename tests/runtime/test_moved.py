"""The modules that moved into runtime/ (issue 38) keep their old names for one release: each old
name is the new module itself, so imports, private names and monkeypatching reach the same code."""

from __future__ import annotations

import importlib

import pytest

import kernelarena.runtime.compare
import kernelarena.runtime.hardware
import kernelarena.runtime.inputs

MOVED = {
    "kernelarena.evaluate.inputs": kernelarena.runtime.inputs,
    "kernelarena.evaluate.compare": kernelarena.runtime.compare,
    "kernelarena.evaluate.environment": kernelarena.runtime.hardware,
    "kernelarena.dispatch.hardware": kernelarena.runtime.hardware,
}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_new_module(old: str) -> None:
    assert importlib.import_module(old) is MOVED[old]
    package, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(package), leaf) is MOVED[old]


def test_one_hardware_identity() -> None:
    from kernelarena.dispatch.hardware import device_profile
    from kernelarena.evaluate.environment import hardware_name

    assert hardware_name is kernelarena.runtime.hardware.hardware_name
    assert device_profile is kernelarena.runtime.hardware.device_profile
