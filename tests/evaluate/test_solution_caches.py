"""Each solution's caches in a folder of its own (``evaluate.sandbox.solution_caches``)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelarena.compile.cache import sandbox_cache
from kernelarena.evaluate.sandbox.confine import landlock_abi
from kernelarena.evaluate.sandbox.solution_caches import LIBRARY_NAMESPACE, namespace_of
from kernelarena.library import library_solution, load_library
from tests import cli_process


def test_library_solutions_share_a_namespace_and_others_get_their_content_hash() -> None:
    solution = next(iter(load_library().solutions.values()))
    assert namespace_of(solution) == LIBRARY_NAMESPACE
    source = solution.sources[0]
    changed = solution.model_copy(
        update={"sources": [source.model_copy(update={"content": source.content + "\n# edited\n"})]}
    )
    assert namespace_of(changed) == changed.content_hash() != solution.content_hash()
    # What the content hash leaves out (its description) does not matter; another name does.
    described = solution.model_copy(update={"description": "a user's copy"})
    assert namespace_of(described) == LIBRARY_NAMESPACE
    renamed = solution.model_copy(update={"name": solution.name + "_copy"})
    assert namespace_of(renamed) == renamed.content_hash()


def test_a_library_solution_read_alone_is_the_one_the_library_loads() -> None:
    """``namespace_of`` reads only the library's solution of the same name: it must be the same
    solution, for every one, and none for a name the library does not have."""
    loaded = load_library().solutions
    assert len(loaded) > 100
    for name, solution in loaded.items():
        alone = library_solution(name)
        assert alone is not None and alone.content_hash() == solution.content_hash(), name
    assert library_solution("rmsnorm_bf16_not_in_the_library") is None
    assert library_solution("") is None


@pytest.mark.parametrize("namespace", ["", "../library", "a/b", "x y"])
def test_a_namespace_cannot_name_a_folder_outside_the_sandboxes_caches(namespace: str) -> None:
    with pytest.raises(ValueError, match="cache namespace"):
        sandbox_cache(namespace)


def test_a_sandbox_that_entered_its_namespace_writes_there_and_nowhere_else(
    tmp_path: Path,
) -> None:
    if landlock_abi() < 1:
        pytest.skip("this kernel has no Landlock: file writes are not confined")
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from kernelarena.compile.cache import cache_root, sandbox_cache, sandbox_caches_root
        from kernelarena.evaluate.sandbox import solution_caches
        from kernelarena.evaluate.sandbox.confine import confine_writes

        root, trusted = sandbox_caches_root(), cache_root()
        mine, others = sandbox_cache("mine"), [sandbox_cache("other"), trusted]
        others.append(sandbox_cache(solution_caches.LIBRARY_NAMESPACE))
        root.mkdir(parents=True)
        confine_writes([str(root)])  # the sandbox's first confinement
        print(solution_caches.enter("mine", [str(root)], confined=True))
        assert cache_root() == mine / "build", cache_root()
        assert Path.home() == mine / "home"
        (cache_root() / "kernel.so").parent.mkdir(parents=True)
        (cache_root() / "kernel.so").write_bytes(b"mine")
        for other in others:
            try:
                other.mkdir(parents=True)
            except PermissionError:
                continue
            sys.exit(f"wrote {other}")
        print("confined")
        """
    )
    # This test run's code (a checkout's src, not only the installed package), and nothing else.
    environment = {
        "KERNELARENA_CACHE": str(tmp_path / "cache"),
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": cli_process.environment()["PYTHONPATH"],
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=environment, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Landlock" in done.stdout and done.stdout.strip().endswith("confined"), done.stdout
    assert (tmp_path / "cache" / "sandboxes" / "mine" / "build" / "kernel.so").exists()
