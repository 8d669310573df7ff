"""Ahead-of-time builds of solutions from outside the library, in a sandbox.

Building a Python or Triton solution imports it, and a CUDA source can ``#include`` any file it
can read: both are the solution's code at work. ``kernelarena build`` therefore builds every
solution whose content is not one of the library's in a sandbox (``sandboxes``: its
namespaces, file-system view, seccomp and Landlock) that may write only the trusted build cache,
where apply will load the artifact, and its own temporary folder. It is not warmed: warming
calls the solution, which ahead of time only the library's own code does. ``dispatch.aot`` takes
this builder from its caller (the command line), since dispatch sits below evaluate.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from kernelarena.compile import cache_root
from kernelarena.data import Definition, Solution

STARTUP_TIMEOUT_S = 600.0


def build_in_sandbox(definition: Definition, solution: Solution, device: str) -> dict[str, Any]:
    """The sandbox's reply to building ``solution``: ``ok`` (with ``metadata``), ``skipped``,
    ``build_error`` or ``error``."""
    from kernelarena.evaluate.sandbox.sandboxes import Sandbox, SandboxDied

    folder = Path(tempfile.mkdtemp(prefix="kernelarena-aot-"))
    try:
        tmp = folder / "tmp"
        tmp.mkdir()
        cache_root().mkdir(parents=True, exist_ok=True)
        writable = [str(cache_root()), "/dev", str(tmp)]
        sandbox = Sandbox(device, folder / "sandbox.log", writable, tmp)
        try:
            sandbox.wait_ready(STARTUP_TIMEOUT_S)
            # No namespace: the build lands in the trusted cache, the only one it may write.
            return sandbox.request("build", definition.to_json_dict(), solution.to_json_dict())
        except SandboxDied as died:
            return {"error": str(died)}
        finally:
            sandbox.retire()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
