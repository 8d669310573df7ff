"""The Ray executor: the jobs of a run spread over the GPUs (or CPU slots) of a Ray cluster.

One Ray actor per GPU holds a LocalExecutor for that GPU, so on every node evaluation still happens
in an isolated worker process (solution code never runs inside the Ray worker), and the worker's
builds, imports and CUDA context are reused from one job to the next. Jobs travel as JSON-ready
payloads that carry the solution's sources, so nothing has to be copied to the nodes beyond an
installed kernelarena; safetensors inputs travel through Ray's object store.

The driver keeps one job in flight per actor and calls ``on_result`` the moment a job comes back, so
traces are appended to the dataset as they arrive. An actor that dies (its process killed, its node
lost) costs only its job in flight: the job goes back to the front of the queue for another actor,
at most ``max_retries`` times, then it is reported as a RUNTIME_ERROR trace; a replacement actor is
started wherever the cluster has room. A solution that crashes its evaluation worker is not a lost
actor: the LocalExecutor inside turns that into a trace, as it does on one machine. Every job is
reported exactly once.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import tempfile
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kernelarena.data import (
    Definition,
    Environment,
    SafetensorsInput,
    Solution,
    Status,
    Trace,
    Workload,
)
from kernelarena.evaluate.jobs import Job, JobResult, Timeouts
from kernelarena.evaluate.leftovers import mark_owner
from kernelarena.evaluate.local import LocalExecutor
from kernelarena.evaluate.options import Options

RAY_MISSING = (
    "the Ray executor needs Ray, an optional dependency of kernelarena: "
    "pip install 'kernelarena[ray]' (on the driver and on every node of the cluster)"
)
# Seconds a job may stay in flight beyond its build, run and worker-restart limits before the
# driver stops trusting the actor; a backstop for a node that hangs without Ray noticing.
_IN_FLIGHT_MARGIN_S = 120.0


def import_ray() -> Any:
    """Ray, imported on first use so kernelarena works without it."""
    try:
        import ray
    except ImportError as error:
        raise ImportError(RAY_MISSING) from error
    return ray


class EvaluationHost:
    """The body of one Ray actor: a LocalExecutor with one worker on the device Ray assigned.

    Ray narrows CUDA_VISIBLE_DEVICES to the GPU it gave this actor, so that GPU is ``cuda:0`` here
    and in the worker process, which inherits the variable.
    """

    def __init__(
        self, device_kind: str, timeouts: dict[str, float], measure_ceilings: bool
    ) -> None:
        ray = import_ray()
        self.device = "cuda:0" if device_kind == "cuda" else "cpu"
        self.executor = LocalExecutor(
            [self.device], Timeouts(**timeouts), measure_ceilings=measure_ceilings
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
        """Start the evaluation worker; return its environment, its start-up phases and where this
        actor runs. The environment goes into failure traces: the start-up record stays apart."""
        (environment,) = self.executor.start()
        startup = environment.pop("startup", {})
        return {"environment": environment, "startup": startup, **self.place}

    def evaluate(
        self, job_id: int, payload: dict[str, Any], blobs: dict[str, Any]
    ) -> dict[str, Any]:
        """Evaluate one job in the worker; ``blobs`` maps a safetensors path to an object ref."""
        if blobs:
            payload = dict(payload, blob_root=str(self._materialize(payload["blob_root"], blobs)))
        job = job_from_payload(job_id, payload)
        results: list[JobResult] = []
        self.executor.run([job], lambda _job, result: results.append(result))
        (result,) = results
        trace = result.trace.to_json_dict() if result.trace is not None else None
        return {"trace": trace, "skipped": result.skipped}

    def shutdown(self) -> None:
        self.executor.close()
        if self.blob_dir is not None:
            shutil.rmtree(self.blob_dir, ignore_errors=True)

    def _materialize(self, origin: str | None, blobs: dict[str, Any]) -> Path:
        """Write shipped safetensors files under a folder named after the dataset they came from."""
        ray = import_ray()
        if self.blob_dir is None:
            self.blob_dir = Path(tempfile.mkdtemp(prefix="kernelarena-blobs-"))
            mark_owner(self.blob_dir)
        root = self.blob_dir / hashlib.sha256(str(origin).encode()).hexdigest()[:16]
        for relative, ref in blobs.items():
            target = root / relative
            if not target.is_file():
                target.parent.mkdir(parents=True, exist_ok=True)
                partial = target.with_name(target.name + ".partial")
                partial.write_bytes(ray.get(ref))
                os.replace(partial, target)
        return root


def job_from_payload(job_id: int, payload: Mapping[str, Any]) -> Job:
    """The inverse of ``Job.payload``."""
    return Job(
        job_id,
        Definition.model_validate(payload["definition"]),
        Solution.model_validate(payload["solution"]),
        Workload.model_validate(payload["workload"]),
        Options(**payload["options"]),
        Path(payload["blob_root"]) if payload.get("blob_root") else None,
    )


@dataclass
class _Actor:
    """The driver's view of one actor."""

    handle: Any
    started: float
    ready_ref: Any = None
    environment: dict[str, Any] = field(default_factory=dict)
    node_id: str = ""
    device: str = ""
    job: Job | None = None
    result_ref: Any = None
    deadline: float = 0.0


class RayExecutor:
    """Run jobs on a Ray cluster; the same interface as LocalExecutor (start, run, close).

    Args:
        address: the cluster: ``None`` (Ray's default: ``$RAY_ADDRESS``, else the cluster started
            on this machine with ``ray start``, else a new Ray on this machine for this run),
            ``"auto"`` (the cluster this machine belongs to) or ``"ray://host:10001"`` (Ray Client).
            If Ray is already initialised in this process, that connection is used as it is.
        timeouts: build, run and worker-startup limits, enforced by the LocalExecutor on each node.
        device: ``"cuda"`` (one GPU per actor), ``"cpu"``, or ``"auto"``: cuda when the cluster has
            GPUs.
        resources: custom Ray resources each actor asks for on top, e.g. ``{"H100": 1}`` on a
            cluster whose nodes declare them, to run only on that GPU model.
        accelerator_type: pins the GPU model through the resource Ray gives every GPU node, e.g.
            ``"H100"`` or ``"H200"`` (see ``ray.util.accelerators``).
        label_selector: node labels each actor requires, e.g. ``{"ray.io/accelerator-type": "H100"}``
            or ``{"pool": "in(bench,ci)"}``.
        workers: how many actors; default: as many as the live nodes hold in total. Those that
            do not fit now (resources busy with other work) wait and join the run when they can.
        num_cpus: CPUs each actor reserves (builds and input generation run on the CPU).
        max_retries: how many times a job lost with its actor is tried again elsewhere.
        measure_ceilings: measure copy bandwidth and matmul rate on each worker at start.
        runtime_env: passed to ``ray.init`` when this executor connects (e.g. ``{"pip": [...]}``).
        join_grace_s: once the first actor is ready, how long ``start`` waits for the others;
            later ones join the run when they are ready.
    """

    def __init__(
        self,
        address: str | None = None,
        timeouts: Timeouts | None = None,
        *,
        device: str = "auto",
        resources: Mapping[str, float] | None = None,
        accelerator_type: str | None = None,
        label_selector: Mapping[str, str] | None = None,
        workers: int | None = None,
        num_cpus: float = 1.0,
        max_retries: int = 3,
        measure_ceilings: bool = True,
        runtime_env: Mapping[str, Any] | None = None,
        join_grace_s: float = 15.0,
    ) -> None:
        if device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device: '{device}' is not 'auto', 'cuda' or 'cpu'")
        if workers is not None and workers < 1:
            raise ValueError("workers: at least one is needed")
        if max_retries < 0:
            raise ValueError("max_retries: must be zero or more")
        self.address = address
        self.timeouts = timeouts or Timeouts()
        self.device = device
        self.resources = dict(resources or {})
        self.accelerator_type = accelerator_type
        self.label_selector = dict(label_selector or {})
        self.workers = workers
        self.num_cpus = num_cpus
        self.max_retries = max_retries
        self.measure_ceilings = measure_ceilings
        self.runtime_env = dict(runtime_env) if runtime_env else None
        self.join_grace_s = join_grace_s
        self._ray: Any = None
        self._remote_class: Any = None
        self._owns_connection = False
        self._device_kind = ""
        self._actors: list[_Actor] = []
        self._environments: list[dict[str, Any]] = []
        self._blob_refs: dict[tuple[str, str], Any] = {}
        self._start_failures = 0
        self._last_start_error = ""

    # -- lifecycle ------------------------------------------------------------------------------

    def uses_gpu(self) -> bool:
        """Whether jobs will run on GPUs (connects to the cluster to find out for 'auto')."""
        self._connect()
        return self._device_kind == "cuda"

    def start(self) -> list[dict[str, Any]]:
        """Start the actors; return the environment of each that is ready.

        The list is the executor's own: actors that become ready later (a node that joined, an
        actor replaced) add theirs to it during ``run``.
        """
        if self._actors:
            return self._environments
        self._connect()
        count = self.workers or actors_that_fit(
            self._live_nodes(), self._demand(), self.label_selector
        )
        if count == 0:
            raise RuntimeError(
                f"no node of the Ray cluster can host an evaluation actor asking for "
                f"{self._demand()}{self._label_note()}; the cluster has "
                f"{self._ray.cluster_resources()}. Pass workers=N to wait for nodes to join."
            )
        self._actors = [self._launch() for _ in range(count)]
        first_ready: float | None = None
        while True:
            starting = [a for a in self._actors if a.ready_ref is not None]
            if not starting:
                break
            now = time.monotonic()
            if first_ready is None and self._starved(now):
                self._raise_starved()
            if first_ready is not None and now - first_ready > self.join_grace_s:
                break
            done, _ = self._ray.wait([a.ready_ref for a in starting], num_returns=1, timeout=1.0)
            for actor in starting:
                if actor.ready_ref in done:
                    self._settle_start(actor)
            if first_ready is None and any(a.ready_ref is None for a in self._actors):
                first_ready = time.monotonic()
        return self._environments

    def close(self) -> None:
        if self._ray is None:
            return
        idle = [a for a in self._actors if a.job is None and a.ready_ref is None]
        stops = [a.handle.shutdown.remote() for a in idle]
        if stops:
            # Let idle actors stop their workers cleanly; busy or starting ones are killed outright.
            self._ray.wait(stops, num_returns=len(stops), timeout=30)
        for actor in self._actors:
            self._kill(actor)
        self._actors = []
        self._blob_refs = {}
        self._environments = []  # a new list: a summary that holds the old one keeps it
        self._start_failures = 0
        self._last_start_error = ""
        if self._owns_connection:
            self._ray.shutdown()
            self._owns_connection = False
        self._ray = None

    def __enter__(self) -> RayExecutor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- running --------------------------------------------------------------------------------

    def run(self, jobs: Sequence[Job], on_result: Callable[[Job, JobResult], None]) -> None:
        self.start()
        queue: deque[Job] = deque(jobs)
        losses: dict[int, list[str]] = {}
        while queue or any(a.job is not None for a in self._actors):
            for actor in self._actors:
                if queue and actor.job is None and actor.ready_ref is None:
                    self._submit(actor, queue.popleft())
            busy = [a for a in self._actors if a.job is not None]
            starting = [a for a in self._actors if a.ready_ref is not None]
            if queue and not busy and self._starved(time.monotonic()):
                self._raise_starved()
            refs = [a.result_ref for a in busy] + [a.ready_ref for a in starting]
            done, _ = self._ray.wait(refs, num_returns=1, timeout=1.0)
            if done:
                # Take everything that finished meanwhile, not only the first.
                done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
            finished = set(done)
            for actor in starting:
                if actor.ready_ref in finished:
                    self._settle_start(actor)
            for actor in busy:
                if actor.result_ref in finished:
                    self._settle_job(actor, queue, losses, on_result)
                elif time.monotonic() > actor.deadline:
                    job = actor.job
                    assert job is not None
                    note = f"no answer from {actor.device} within {self._job_limit():g} s"
                    self._lose(actor, job, note, queue, losses, on_result)

    def _submit(self, actor: _Actor, job: Job) -> None:
        actor.job = job
        actor.deadline = time.monotonic() + self._job_limit()
        actor.result_ref = actor.handle.evaluate.remote(job.id, job.payload(), self._blobs_for(job))

    def _settle_job(
        self,
        actor: _Actor,
        queue: deque[Job],
        losses: dict[int, list[str]],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        ray = self._ray
        job = actor.job
        assert job is not None
        try:
            outcome = ray.get(actor.result_ref)
        except ray.exceptions.RayError as error:
            # The actor's process or node died (RayActorError), kernelarena failed inside it (its
            # worker would not restart, say: RayTaskError), or the result was lost with its node.
            # Either way this actor is done and the job was not evaluated.
            self._lose(actor, job, _first_line(error), queue, losses, on_result)
            return
        actor.job = None
        trace = Trace.model_validate(outcome["trace"]) if outcome["trace"] else None
        on_result(job, JobResult(trace=trace, skipped=outcome["skipped"], device=actor.device))

    def _lose(
        self,
        actor: _Actor,
        job: Job,
        reason: str,
        queue: deque[Job],
        losses: dict[int, list[str]],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        """The actor running ``job`` is gone: replace it; retry the job or, past the limit, fail it."""
        environment = actor.environment
        self._retire(actor)
        self._retire_dead_node_peers(actor.node_id)
        losses.setdefault(job.id, []).append(f"{actor.device}: {reason}")
        if len(losses[job.id]) <= self.max_retries:
            queue.appendleft(job)
            return
        log = (
            f"the Ray actor evaluating this job was lost {_times(len(losses[job.id]))}; "
            "not retried again:\n" + "\n".join(losses[job.id])
        )
        trace = job.failure_trace(
            Environment.model_validate(environment), Status.RUNTIME_ERROR, log
        )
        on_result(job, JobResult(trace=trace, device=actor.device))

    # -- actors ---------------------------------------------------------------------------------

    def _connect(self) -> None:
        if self._ray is not None:
            return
        ray = import_ray()
        if not ray.is_initialized():
            ray.init(address=self.address, runtime_env=self.runtime_env, log_to_driver=False)
            self._owns_connection = True
        self._ray = ray
        if self.device == "auto":
            has_gpu = any(n.get("Resources", {}).get("GPU", 0) > 0 for n in self._live_nodes())
            self._device_kind = "cuda" if has_gpu else "cpu"
        else:
            self._device_kind = self.device

    def _demand(self) -> dict[str, float]:
        """What one actor asks of a node, in the names of ``ray.nodes()``."""
        demand = {"CPU": self.num_cpus, **self.resources}
        if self._device_kind == "cuda":
            demand["GPU"] = 1.0
        if self.accelerator_type:
            demand[f"accelerator_type:{self.accelerator_type}"] = 0.001  # what Ray itself asks
        return {name: amount for name, amount in demand.items() if amount > 0}

    def _live_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self._ray.nodes() if n.get("Alive")]

    def _launch(self) -> _Actor:
        options: dict[str, Any] = {
            "num_cpus": self.num_cpus,
            "num_gpus": 1 if self._device_kind == "cuda" else 0,
            # The driver retries jobs itself, on any actor; Ray restarting an actor in place would
            # hide the loss and run the job twice.
            "max_restarts": 0,
            "max_task_retries": 0,
        }
        if self.resources:
            options["resources"] = self.resources
        if self.accelerator_type:
            options["accelerator_type"] = self.accelerator_type
        if self.label_selector:
            options["label_selector"] = self.label_selector
        if self._remote_class is None:
            self._remote_class = self._ray.remote(EvaluationHost)
        handle = self._remote_class.options(**options).remote(
            self._device_kind, asdict(self.timeouts), self.measure_ceilings
        )
        return _Actor(handle=handle, started=time.monotonic(), ready_ref=handle.start.remote())

    def _settle_start(self, actor: _Actor) -> None:
        ray = self._ray
        try:
            ready = ray.get(actor.ready_ref)
        except ray.exceptions.RayError as error:
            self._start_failures += 1
            self._last_start_error = str(error)
            if self._start_failures > max(3, 2 * len(self._actors)):
                raise RuntimeError(
                    f"Ray evaluation actors keep failing to start; the last error:\n{error}"
                ) from None
            self._retire(actor)
            return
        actor.ready_ref = None
        actor.environment = ready["environment"]
        actor.node_id = ready["node_id"]
        actor.device = ready["device"]
        self._environments.append(
            dict(
                actor.environment,
                device=actor.device,
                host=ready["host"],
                startup=ready.get("startup", {}),
            )
        )

    def _retire(self, actor: _Actor) -> None:
        """Kill an actor and start a replacement in its place (Ray puts it wherever there is room)."""
        self._kill(actor)
        self._actors[self._actors.index(actor)] = self._launch()

    def _retire_dead_node_peers(self, node_id: str) -> None:
        """When a node is gone, replace its idle actors too, before they are handed a job."""
        if not node_id or any(n.get("NodeID") == node_id for n in self._live_nodes()):
            return
        for actor in list(self._actors):
            if actor.node_id == node_id and actor.job is None and actor.ready_ref is None:
                self._retire(actor)

    def _kill(self, actor: _Actor) -> None:
        # Fails when the actor is already dead or its node gone: nothing is left to kill then.
        with contextlib.suppress(Exception):
            self._ray.kill(actor.handle, no_restart=True)

    def _starved(self, now: float) -> bool:
        """True when no actor is ready and the oldest starting one has waited past the limit."""
        if any(a.ready_ref is None for a in self._actors):
            return False
        oldest = min((a.started for a in self._actors), default=now)
        return now - oldest > self.timeouts.startup_s

    def _raise_starved(self) -> None:
        last = (
            f"; the last start failure:\n{self._last_start_error}" if self._last_start_error else ""
        )
        raise RuntimeError(
            f"no Ray evaluation actor became ready in {self.timeouts.startup_s:g} s; each asks for "
            f"{self._demand()}{self._label_note()}, the cluster has "
            f"{self._ray.cluster_resources()}{last}"
        )

    def _label_note(self) -> str:
        return f" on nodes labelled {self.label_selector}" if self.label_selector else ""

    def _job_limit(self) -> float:
        t = self.timeouts
        return t.build_s + t.run_s + t.startup_s + _IN_FLIGHT_MARGIN_S

    def _blobs_for(self, job: Job) -> dict[str, Any]:
        """Object refs of the job's safetensors files, each put in the object store once."""
        if job.blob_root is None:
            return {}
        blobs: dict[str, Any] = {}
        for given in job.workload.inputs.values():
            if not isinstance(given, SafetensorsInput):
                continue
            key = (str(job.blob_root), given.path)
            if key not in self._blob_refs:
                source = job.blob_root / given.path
                if not source.is_file():
                    continue  # the worker reports the missing file in the job's trace
                self._blob_refs[key] = self._ray.put(source.read_bytes())
            blobs[given.path] = self._blob_refs[key]
        return blobs


def actors_that_fit(
    nodes: Sequence[Mapping[str, Any]],
    demand: Mapping[str, float],
    label_selector: Mapping[str, str],
) -> int:
    """How many actors asking ``demand`` the live ``nodes`` (as ``ray.nodes()`` lists them) hold."""
    total = 0
    for node in nodes:
        labels = node.get("Labels") or {}
        if not node.get("Alive") or not all(
            _label_matches(labels.get(key), wanted) for key, wanted in label_selector.items()
        ):
            continue
        have = node.get("Resources") or {}
        total += min(
            (int(have.get(name, 0.0) // amount) for name, amount in demand.items()), default=1
        )
    return total


def _label_matches(value: str | None, selector: str) -> bool:
    """Ray's label selector syntax: ``v``, ``!v``, ``in(a,b)``, ``!in(a,b)``."""
    negate = selector.startswith("!")
    body = selector[1:] if negate else selector
    if body.startswith("in(") and body.endswith(")"):
        allowed = {part.strip() for part in body[3:-1].split(",")}
    else:
        allowed = {body}
    return (value in allowed) != negate


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
