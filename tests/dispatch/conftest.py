"""Every dispatch test gets its own cache folder and leaves apply off behind it.

The marker solutions of ``toys.py`` fill their outputs with a constant of their own, wrong on
purpose (a result shows which one ran): verify is off unless a test turns it on
(``enable_apply(verify=True)``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelarena.dispatch.apply import disable_apply


@pytest.fixture(autouse=True)
def isolated_apply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    cache = tmp_path / "cache"
    monkeypatch.setenv("KERNELARENA_CACHE", str(cache))
    for variable in ("KERNELARENA_APPLY", "KERNELARENA_TRACE", "KERNELARENA_DATASET"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("KERNELARENA_VERIFY", "0")
    monkeypatch.delenv("KERNELARENA_VERIFY_EVERY", raising=False)
    disable_apply()
    yield cache
    disable_apply()


@pytest.fixture
def cache(isolated_apply: Path) -> Path:
    return isolated_apply
