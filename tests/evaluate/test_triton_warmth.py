"""Triton's start-up paid ahead (``evaluate.sandbox.triton_warmth``): which solutions may use
Triton, and the zygote computing its cache key once for all its forks but the first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelarena.evaluate.sandbox.forked import Zygote
from kernelarena.evaluate.sandbox.isolation import walls
from kernelarena.evaluate.sandbox.triton_warmth import may_use_triton

pytest.importorskip("triton")


def test_solutions_that_may_launch_triton_kernels() -> None:
    def solution(language: str, source: str, dependencies: tuple[str, ...] = ()) -> dict:
        return {
            "spec": {"language": language, "dependencies": list(dependencies)},
            "sources": [{"path": "s.py", "content": source}],
        }

    assert may_use_triton(solution("triton", "def run(x): ..."))
    assert may_use_triton(solution("python", "import torch\nf = torch.compile(g)"))
    assert may_use_triton(solution("python", "from liger_kernel import x", ("liger-kernel",)))
    assert not may_use_triton(solution("python", "import torch\ndef run(x): return x * 2"))
    assert not may_use_triton(solution("cuda", "__global__ void k() {}"))


@pytest.mark.parametrize(
    ("device", "with_triton"), [("cuda:0", True), ("cuda:0", False), ("cpu", True)]
)
def test_the_zygote_prepares_its_forks_without_cuda_or_tritons_key(
    device: str, with_triton: bool
) -> None:
    """What the forks' first requests import is imported; CUDA, which no fork could inherit, is
    not touched, and Triton's cache key waits for the judge's first forks (``zygote.main``), as
    Triton's import does where the zygote says so."""
    program = (
        "import sys\n"
        "from kernelarena.evaluate.sandbox.zygote import prepare_forks\n"
        f"prepare_forks({device!r}, with_triton={with_triton})\n"
        "imported_triton = 'triton' in sys.modules\n"
        "from triton.runtime.cache import triton_key\n"
        "import os, torch\n"
        "print(triton_key.cache_info().currsize, os.environ.get('TRITON_INTERPRET'),\n"
        "      'kernelarena.evaluate.sandbox.reference_serving' in sys.modules,\n"
        "      torch.cuda.is_initialized(), imported_triton)\n"
    )
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    found = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env=environment,
    )
    cached, interpreted, imported, cuda_initialized, imported_triton = found.stdout.split()
    assert int(cached) == 0
    assert interpreted == ("None" if device.startswith("cuda") else "1")
    assert imported == "True" and cuda_initialized == "False"
    assert imported_triton == str(with_triton)


@pytest.mark.skipif(not walls().available, reason="no namespaces here: no zygote")
@pytest.mark.parametrize("unkeyed", [2, 0])
def test_a_gpu_zygote_computes_tritons_key_once_after_the_first_forks(
    tmp_path: Path, unkeyed: int
) -> None:
    """The judge's first forks, which its first job waits for, do not wait for the key (0.4-0.6 s
    of hashing); the forks after them inherit it. Needs no GPU: the key hashes files, and on a
    machine without one each fork ends without a CUDA context, after the zygote has answered."""
    zygote = Zygote("cuda:0", tmp_path, [], walls(), unkeyed)
    said: list[str] = []
    try:
        for number in range(3):
            fork_tmp = tmp_path / f"fork-{number}"
            fork_tmp.mkdir()
            zygote.fork(tmp_path / f"fork-{number}.log", fork_tmp, [], 120.0)
            said.append(_key_line(zygote.log_path, timeout=0.5 if number + 1 < unkeyed else 60.0))
    finally:
        zygote.close()
    assert said[: max(unkeyed - 1, 0)] == [""] * max(unkeyed - 1, 0)
    assert f"after {unkeyed} forks" in said[max(unkeyed - 1, 0)]
    assert _key_line(zygote.log_path, 0.0).count("\n") == 0, "computed once"


def _key_line(log: Path, timeout: float) -> str:
    """The zygote's line about Triton's key, once it is in ``log``, or "" after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        lines = [line for line in log.read_text().splitlines() if "cache key" in line]
        if lines or time.monotonic() >= deadline:
            return "\n".join(lines)
        time.sleep(0.05)
