"""One build of the build pool (``build_pool``), confined as a sandbox is: the solution's code.

A CUDA source can ``#include`` any file it can read, and loading the built library runs its static
initialisers: the build is the solution's code at work. The pool starts this process behind the
sandbox's walls (``isolation.walled``); it raises the same layers inside (``confine.
confine_sandbox``), enters the solution's cache namespace as its sandbox will (``solution_caches.
enter``: the artifact lands where the sandbox looks, and nothing else is writable), builds for the
target it is given (``cpu`` or ``sm_90a``: no CUDA context is made) and writes one JSON reply to
a file in its temporary folder. Its output (the compiler's) goes to the pool's log of the build.

    python -m kernelarena.evaluate.executors.build_process REQUEST REPLY WRITABLE...
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from kernelarena.evaluate.executors.build_pool import NICENESS


def build(request: dict[str, Any], writable: list[str], confined: bool) -> dict[str, Any]:
    from kernelarena.compile import BuildError, CachedBuildError, DependencyMissing, build_solution
    from kernelarena.data import Definition, Solution

    namespace = request.get("namespace")
    if namespace:
        from kernelarena.evaluate.sandbox import solution_caches

        solution_caches.enter(namespace, writable, confined)
    definition = Definition.model_validate(request["definition"])
    solution = Solution.model_validate(request["solution"])
    try:
        runnable = build_solution(definition, solution, request["target"])
    except DependencyMissing as error:
        return {"skipped": str(error)}
    except BuildError as error:
        return {"build_error": str(error)[-8000:], "cached": isinstance(error, CachedBuildError)}
    except Exception:
        return {"error": traceback.format_exc()[-8000:]}
    return {"ok": True, "artifact": str(runnable.artifact or "")}


def main(argv: list[str]) -> None:
    request_path, reply_path, writable = argv[0], argv[1], argv[2:]
    from kernelarena.evaluate.sandbox.confine import confine_sandbox, die_with_parent

    die_with_parent()
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    unconfined = os.environ.get("KERNELARENA_UNCONFINED") == "1"
    confinement = "" if unconfined else confine_sandbox(writable)
    print(f"kernelarena build: {confinement or 'not confined'}", flush=True)
    request = json.loads(Path(request_path).read_text())
    reply = build(request, writable, confined="Landlock ABI" in confinement)
    Path(reply_path).write_text(json.dumps(reply, default=str))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
