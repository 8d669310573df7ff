"""Triton's start-up paid ahead (``evaluate.sandbox.triton_warmth``): which solutions may use
Triton, and the zygote computing its cache key once for all its forks."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

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


@pytest.mark.parametrize("device, computed", [("cuda:0", 1), ("cpu", 0)])
def test_the_zygote_computes_tritons_cache_key_once_for_its_gpu_forks(
    device: str, computed: int
) -> None:
    """On a GPU every fork inherits the key (0.4-0.6 s of hashing each, before it said it was
    ready); on the CPU the interpreter has none to compute. Needs no GPU: the key hashes files.
    (On a GPU machine the same test shows the zygote left CUDA alone.)"""
    program = (
        "from kernelarena.evaluate.sandbox.zygote import prepare_forks\n"
        f"prepare_forks({device!r})\n"
        "from triton.runtime.cache import triton_key\n"
        "import os, sys, torch\n"
        "print(triton_key.cache_info().currsize, os.environ.get('TRITON_INTERPRET'),\n"
        "      'kernelarena.evaluate.sandbox.reference_serving' in sys.modules,\n"
        "      torch.cuda.is_initialized())\n"
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
    cached, interpreted, imported, cuda_initialized = found.stdout.split()
    assert int(cached) == computed
    assert interpreted == ("None" if device.startswith("cuda") else "1")
    # What the forks' first requests import is imported; CUDA, which no fork could inherit, not.
    assert imported == "True" and cuda_initialized == "False"
