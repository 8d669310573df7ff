"""Bytecode for kernelarena's processes: judges write it where the machine keeps none, sandboxes
only read it, and no sandbox may write the folder (a planted .pyc would run in the next judge)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kernelarena.evaluate.judge.worker import _sandbox_writable
from kernelarena.evaluate.sandbox import bytecode


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = tmp_path / "bytecode"
    monkeypatch.setenv("KERNELARENA_BYTECODE_CACHE", str(target))
    monkeypatch.delenv("KERNELARENA_BYTECODE", raising=False)
    return target


def test_judge_writes_and_sandbox_reads_where_no_bytecode_is_kept(folder: Path) -> None:
    found = {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}
    judge = bytecode.with_bytecode(found, writes=True)
    assert judge["PYTHONPYCACHEPREFIX"] == str(folder)
    assert "PYTHONDONTWRITEBYTECODE" not in judge
    assert folder.is_dir()
    sandbox = bytecode.with_bytecode(judge, writes=False)
    assert sandbox["PYTHONPYCACHEPREFIX"] == str(folder)
    assert sandbox["PYTHONDONTWRITEBYTECODE"] == "1"
    assert found == {"PYTHONDONTWRITEBYTECODE": "1", "PATH": "/bin"}  # not changed in place


def test_users_choices_stand(folder: Path) -> None:
    own = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/elsewhere"}
    assert bytecode.with_bytecode(own, writes=True) == own
    off = {"PYTHONDONTWRITEBYTECODE": "1", "KERNELARENA_BYTECODE": "0"}
    assert bytecode.with_bytecode(off, writes=True) == off
    # A sandbox never writes bytecode, whatever the machine does.
    assert bytecode.with_bytecode({}, writes=False)["PYTHONDONTWRITEBYTECODE"] == "1"


def test_default_folder_is_out_of_every_sandbox_writable_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KERNELARENA_BYTECODE_CACHE", raising=False)
    monkeypatch.setenv("KERNELARENA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    target = bytecode.bytecode_folder().resolve()
    for writable in _sandbox_writable():
        assert not target.is_relative_to(Path(writable).resolve()), writable


def test_a_child_interpreter_writes_its_bytecode_there(folder: Path, tmp_path: Path) -> None:
    module = tmp_path / "src" / "some_module_kernelarena_test.py"
    module.parent.mkdir()
    module.write_text("VALUE = 42\n")
    environment = bytecode.with_bytecode(
        {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(module.parent)}, writes=True
    )
    code = "import some_module_kernelarena_test as m; print(m.VALUE)"
    for writes in (True, False):
        env = environment if writes else bytecode.with_bytecode(environment, writes=False)
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert done.stdout.strip() == "42", done.stderr
    written = list(folder.rglob("some_module_kernelarena_test*.pyc"))
    assert len(written) == 1
    assert not (module.parent / "__pycache__").exists()
