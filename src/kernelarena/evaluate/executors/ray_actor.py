"""The body of one Ray actor of the Ray executor (``ray_executor``): a local executor with one
judge on the device Ray gave it, and a build pool that compiles the run's solutions ahead.

Ray narrows CUDA_VISIBLE_DEVICES to the GPU it gave the actor, so that GPU is ``cuda:0`` here and
in the judge, which inherits the variable. Solution code never runs in the actor's process: the
judge and its sandboxes contain it as on one machine.

Builds go as on one machine (``local``): the driver hands each actor the run's compiled solutions
once (``prebuild``), in the order of the jobs, and the actor's pool (``build_pool``) builds them in
parallel, confined, while the judge evaluates what is built; a job whose build failed gets its
compile error without the judge. Before, every CUDA job of a Ray run started a pool of its own and
a build process, one job at a time. The pool's slots are the actor's share of its node: the node's
(``pool_slots``) divided among the actors that fit there.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path
from typing import Any

from kernelarena.evaluate.executors.jobs import Job, JobResult, Timeouts
from kernelarena.evaluate.executors.leftovers import mark_owner
from kernelarena.evaluate.executors.local import LocalExecutor
from kernelarena.evaluate.executors.ray_placement import actors_that_fit
from kernelarena.evaluate.executors.ray_wire import materialize

RAY_MISSING = (
    "the Ray executor needs Ray, an optional dependency of kernelarena: "
    "pip install 'kernelarena[ray]' (on the driver and on every node of the cluster)"
)


def import_ray() -> Any:
    """Ray, imported on first use so kernelarena works without it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_MISSING) from error
    return ray


class EvaluationHost:
    """One actor: ``start`` the judge, ``prebuild`` the run's solutions, ``evaluate`` jobs."""

    def __init__(
        self,
        device_kind: str,
        timeouts: dict[str, float],
        measure_ceilings: bool,
        demand: dict[str, float] | None = None,
    ) -> None:
        ray = import_ray()
        self.device = "cuda:0" if device_kind == "cuda" else "cpu"
        self.pool = _build_pool(ray, demand or {}, timeouts.get("build_s", 900.0))
        self.executor = LocalExecutor(
            [self.device],
            Timeouts(**timeouts),
            measure_ceilings=measure_ceilings,
            build_pool=self.pool if self.pool is not None else False,
        )
        gpu_ids = [str(i) for i in ray.get_gpu_ids()]
        host = socket.gethostname()
        self.place = {
            "host": host,
            "node_id": ray.get_runtime_context().get_node_id(),
            "device": f"{host}:cuda:{','.join(gpu_ids)}" if gpu_ids else f"{host}:cpu",
        }
        self.blob_dir: Path | None = None  # made when a job first brings safetensors files

    def start(self) -> dict[str, Any]:
        """Start the judge; return its environment, its start-up phases and where this actor
        runs. The environment goes into failure traces: the start-up record stays apart."""
        (environment,) = self.executor.start()
        startup = environment.pop("startup", {})
        return {"environment": environment, "startup": startup, **self.place}

    def prebuild(self, builds: list[dict[str, Any]]) -> int:
        """Queue the builds of a run (``definition`` and ``solution`` payloads, in the order of
        its jobs) in this actor's pool; how many it builds (the others need no build)."""
        from kernelarena.data import Definition, Solution
        from kernelarena.evaluate.executors.build_targets import build_target

        if self.pool is None:
            return 0
        target = build_target(self.device)
        queued = 0
        for build in builds:
            definition = Definition.model_validate(build["definition"])
            solution = Solution.model_validate(build["solution"])
            queued += self.pool.submit(definition, solution, target) is not None
        return queued

    def build_summary(self) -> dict[str, Any]:
        """What this actor's pool has built (``BuildPool.summary``); empty without a pool."""
        return self.pool.summary() if self.pool is not None else {}

    def evaluate(
        self, job_id: int, payload: dict[str, Any], blobs: dict[str, Any]
    ) -> dict[str, Any]:
        """Evaluate one job in the judge; ``blobs`` maps a safetensors path to an object ref."""
        if blobs:
            payload = dict(payload, blob_root=str(self._materialize(payload["blob_root"], blobs)))
        job = Job.from_payload(job_id, payload)
        results: list[JobResult] = []
        self.executor.run([job], lambda _job, result: results.append(result))
        (result,) = results
        return result.payload()

    def shutdown(self) -> None:
        self.executor.close()  # and the pool with it
        if self.blob_dir is not None:
            shutil.rmtree(self.blob_dir, ignore_errors=True)

    def _materialize(self, origin: str | None, blobs: dict[str, Any]) -> Path:
        if self.blob_dir is None:
            self.blob_dir = Path(tempfile.mkdtemp(prefix="kernelarena-blobs-"))
            mark_owner(self.blob_dir)
        return materialize(import_ray(), self.blob_dir, origin, blobs)


def _build_pool(ray: Any, demand: dict[str, float], timeout_s: float) -> Any:
    """The actor's build pool, with its share of the node's slots; None where builds are
    turned off (``KERNELARENA_BUILD_POOL=0``: the sandboxes build)."""
    from kernelarena.evaluate.executors.build_pool import BuildPool
    from kernelarena.evaluate.executors.build_targets import pool_slots

    if os.environ.get("KERNELARENA_BUILD_POOL") == "0":
        return None
    node_id = ray.get_runtime_context().get_node_id()
    node = next((n for n in ray.nodes() if n.get("NodeID") == node_id), None)
    sharing = max(1, actors_that_fit([node], demand, {})) if node is not None and demand else 1
    return BuildPool(max(1, pool_slots(devices=sharing) // sharing), timeout_s=timeout_s)
