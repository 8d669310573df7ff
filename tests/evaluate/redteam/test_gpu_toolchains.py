"""On a GPU, inside the walls: CUDA initialises, nvcc builds through apache-tvm-ffi, Triton's JIT
and a torch C++/CUDA extension compile and run (``tests/fixtures/redteam/gpu_toolchains.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelarena.compile.cache import sandbox_caches_root
from kernelarena.evaluate.sandbox.sandboxes import Sandbox
from kernelarena.evaluate.sandbox.solution_caches import namespace_of
from kernelarena.library import load_library
from tests.evaluate.bad_solutions import DEFINITION, solution

TOOLCHAINS = Path(__file__).parents[2] / "fixtures" / "redteam"


def _sandbox(tmp_path: Path) -> Sandbox:
    tmp = tmp_path / "tmp"
    tmp.mkdir(parents=True)
    sandbox_caches_root().mkdir(parents=True, exist_ok=True)
    writable = [str(sandbox_caches_root()), "/dev", str(tmp)]
    sandbox = Sandbox("cuda:0", tmp_path / "sandbox.log", writable, tmp)
    sandbox.wait_ready(600)
    return sandbox


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_nvcc_triton_and_torch_extensions_work_inside_the_walls(tmp_path: Path) -> None:
    library = load_library()
    cuda = library.solutions["scale_fp32_cuda"]
    builds = [
        (library.definitions[cuda.definition], cuda),
        (DEFINITION, solution("gpu_toolchains", True, folder=TOOLCHAINS)),
    ]
    for definition, built in builds:
        sandbox = _sandbox(tmp_path / built.name)
        try:
            assert sandbox.confinement.startswith("namespaces"), sandbox.confinement
            reply = sandbox.request(
                "build", definition.to_json_dict(), built.to_json_dict(), namespace_of(built)
            )
        finally:
            sandbox.retire()
        assert "ok" in reply, f"{built.name}: {reply}\n{sandbox.log_since(0)}"
