"""Test set-up: Triton runs under its interpreter where there is no GPU; ``gpu`` tests need one."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

# pytest-xdist's workers set COLUMNS=80; the command line's console reads it once, at import, and
# in-process CLI tests expect the width a piped run gets (tests of folding set COLUMNS themselves).
os.environ.pop("COLUMNS", None)

HAS_CUDA = torch.cuda.is_available()
if not HAS_CUDA:
    # Must be set before any module defining a @triton.jit kernel is imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--apply-fastpath",
        choices=("auto", "compiled", "python"),
        default="auto",
        help="the hot path of functions @kernelarena.apply decorates in these tests: compiled "
        "(an error where it cannot be built), python (KERNELARENA_APPLY_FASTPATH=0), or auto "
        "(compiled where it can be; the default)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Before collection: test modules decorate their functions when they are imported."""
    choice = config.getoption("--apply-fastpath")
    if choice == "python":
        os.environ["KERNELARENA_APPLY_FASTPATH"] = "0"
    elif choice == "compiled":
        os.environ.pop("KERNELARENA_APPLY_FASTPATH", None)
        from kernelarena.dispatch import fastcall

        if fastcall.module() is None:
            raise pytest.UsageError(f"--apply-fastpath=compiled: apply's is {fastcall.status()}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def device() -> torch.device:
    return torch.device("cuda" if HAS_CUDA else "cpu")


@pytest.fixture(autouse=True)
def _registry_restored() -> Iterator[None]:
    """Solutions a test registers (``kernelarena.register``) are gone after it: a later test in
    the same process would otherwise run them, their modules' folders deleted."""
    from kernelarena import registry

    before = dict(registry._REGISTERED)
    yield
    registry._REGISTERED.clear()
    registry._REGISTERED.update(before)
