"""The Ray executor: the jobs of a run spread over the GPUs (or CPU slots) of a Ray cluster.

One Ray actor per GPU (``ray_actor.EvaluationHost``) holds a LocalExecutor for that GPU, so on
every node evaluation still happens in an isolated judge process (solution code never runs inside
the Ray worker), and the judge's imports, CUDA context and sandboxes are reused from one job to the
next; each actor builds the run's compiled solutions ahead in a build pool of its own, which the
driver fills at the start of the run. Jobs travel as JSON-ready payloads that carry the solution's
sources, so nothing has to be copied to the nodes beyond an installed kernelarena; safetensors
inputs travel through Ray's object store. Where actors go is ``ray_placement``'s.

The driver keeps one job in flight per actor, each actor on one solution as long as it has jobs
and, in a definition of many workloads, on workloads no other actor has judged (``jobs.JobTaker``:
a new solution costs an actor's judge a sandbox, a new workload its draws), and calls ``on_result``
the moment a job comes back, so traces are appended to the dataset as they arrive. An actor that
dies (its process killed, its node lost) costs only its job in flight: the job goes back to the
front of the queue for another actor, at most ``max_retries`` times, then it is reported as a
RUNTIME_ERROR trace; a replacement actor is started wherever the cluster has room. A solution that
crashes its evaluation worker is not a lost actor: the LocalExecutor inside turns that into a
trace, as it does on one machine. Every job is reported exactly once.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from typing import Any

from kernelarena.data import Environment, Status
from kernelarena.evaluate.executors.jobs import Job, JobResult, JobTaker, Timeouts
from kernelarena.evaluate.executors.ray_actor import EvaluationHost, import_ray
from kernelarena.evaluate.executors.ray_placement import (
    Actor,
    ActorFleet,
    actor_demand,
    actor_options,
    actors_that_fit,
    label_note,
)
from kernelarena.evaluate.executors.ray_wire import ShippedBlobs, build_requests, merged_summaries

# Seconds a job may stay in flight beyond its build, run and worker-restart limits before the
# driver stops trusting the actor; a backstop for a node that hangs without Ray noticing.
_IN_FLIGHT_MARGIN_S = 120.0


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
        self._fleet: ActorFleet | None = None  # made by ``start``
        self._blobs: ShippedBlobs | None = None  # made when connected
        self._builds: list[dict[str, Any]] = []  # the run's, for each actor's pool (``prebuild``)
        self.build_summary: dict[str, Any] = {}  # the actors' pools after the last run

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
        if self._fleet is not None:
            return self._fleet.environments
        self._connect()
        demand = self._demand()
        self._fleet = ActorFleet(
            self._ray,
            self._launch,
            demand,
            self.label_selector,
            self.timeouts.startup_s,
            on_ready=self._prebuild,  # an actor that joins a run under way gets its builds
        )
        count = self.workers or actors_that_fit(
            self._fleet.live_nodes(), demand, self.label_selector
        )
        if count == 0:
            raise RuntimeError(
                f"no node of the Ray cluster can host an evaluation actor asking for "
                f"{demand}{label_note(self.label_selector)}; the cluster has "
                f"{self._ray.cluster_resources()}. Pass workers=N to wait for nodes to join."
            )
        return self._fleet.start(count, self.join_grace_s)

    def close(self) -> None:
        if self._ray is None:
            return
        if self._fleet is not None:
            self._fleet.stop()
        self._fleet = None  # a summary that holds the last environments keeps them
        self._blobs = None
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
        taker = JobTaker(jobs)
        losses: dict[int, list[str]] = {}
        fleet = self._fleet
        assert fleet is not None
        self._builds = build_requests(jobs)
        for actor in fleet.actors:
            if actor.ready_ref is None:
                self._prebuild(actor)
        try:
            while queue or any(a.job is not None for a in fleet.actors):
                self._hand_out(queue, taker)
                self._wait_and_settle(queue, losses, on_result)
        finally:
            self._builds = []
        self.build_summary = self._pools_summary()

    def _pools_summary(self) -> dict[str, Any]:
        """The ready actors' pools as one (``ray_wire.merged_summaries``); an actor that does
        not answer within seconds is left out."""
        assert self._fleet is not None
        asked = [a.handle.build_summary.remote() for a in self._fleet.actors if a.ready_ref is None]
        done, _ = self._ray.wait(asked, num_returns=len(asked), timeout=10) if asked else ([], [])
        found = []
        for ref in done:
            with contextlib.suppress(self._ray.exceptions.RayError):
                found.append(self._ray.get(ref))
        return merged_summaries(found)

    def _hand_out(self, queue: deque[Job], taker: JobTaker) -> None:
        assert self._fleet is not None
        actors = self._fleet.actors
        for actor in actors:
            if queue and actor.job is None and actor.ready_ref is None:
                others = {a.solution for a in actors if a is not actor and a.job is not None}
                elsewhere = {o for o in others if o}
                job = taker.take(queue, id(actor), actor.solution, elsewhere, lambda _: True)
                if job is not None:
                    self._submit(actor, job)
        busy = any(a.job is not None for a in actors)
        if queue and not busy and self._fleet.starved(time.monotonic()):
            self._fleet.raise_starved()

    def _wait_and_settle(
        self,
        queue: deque[Job],
        losses: dict[int, list[str]],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        fleet = self._fleet
        assert fleet is not None
        busy = [a for a in fleet.actors if a.job is not None]
        starting = [a for a in fleet.actors if a.ready_ref is not None]
        refs = [a.result_ref for a in busy] + [a.ready_ref for a in starting]
        done, _ = self._ray.wait(refs, num_returns=1, timeout=1.0)
        if done:
            # Take everything that finished meanwhile, not only the first.
            done, _ = self._ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = set(done)
        for actor in starting:
            if actor.ready_ref in finished:
                fleet.settle_start(actor)
        for actor in busy:
            if actor.result_ref in finished:
                self._settle_job(actor, queue, losses, on_result)
            elif time.monotonic() > actor.deadline:
                job = actor.job
                assert job is not None
                note = f"no answer from {actor.device} within {self._job_limit():g} s"
                self._lose(actor, job, note, queue, losses, on_result)

    def _submit(self, actor: Actor, job: Job) -> None:
        actor.job = job
        actor.solution = job.solution.name
        actor.deadline = time.monotonic() + self._job_limit()
        actor.result_ref = actor.handle.evaluate.remote(job.id, job.payload(), self._shipped(job))

    def _shipped(self, job: Job) -> dict[str, Any]:
        if self._blobs is None:
            self._blobs = ShippedBlobs(self._ray)
        return self._blobs.for_job(job)

    def _prebuild(self, actor: Actor) -> None:
        """The run's builds into the actor's pool, ahead of its jobs (Ray runs an actor's calls
        in order, so they are queued before its first job is evaluated)."""
        if self._builds:
            actor.handle.prebuild.remote(self._builds)

    def _settle_job(
        self,
        actor: Actor,
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
        on_result(job, JobResult.from_payload(outcome, actor.device))

    def _lose(
        self,
        actor: Actor,
        job: Job,
        reason: str,
        queue: deque[Job],
        losses: dict[int, list[str]],
        on_result: Callable[[Job, JobResult], None],
    ) -> None:
        """The actor running ``job`` is gone: replace it; retry the job or, past the limit, fail it."""
        assert self._fleet is not None
        environment = actor.environment
        self._fleet.retire(actor)
        self._fleet.retire_dead_node_peers(actor.node_id)
        losses.setdefault(job.id, []).append(f"{actor.device}: {reason}")
        if len(losses[job.id]) <= self.max_retries:
            queue.appendleft(job)
            return
        log = (
            f"the Ray actor evaluating this job was lost {_times(len(losses[job.id]))}; "
            "not retried again:\n" + "\n".join(losses[job.id])
        )
        trace = job.make_trace(Environment.model_validate(environment), Status.RUNTIME_ERROR, log)
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
            live = [n for n in ray.nodes() if n.get("Alive")]
            has_gpu = any(n.get("Resources", {}).get("GPU", 0) > 0 for n in live)
            self._device_kind = "cuda" if has_gpu else "cpu"
        else:
            self._device_kind = self.device

    def _demand(self) -> dict[str, float]:
        """What one actor asks of a node, in the names of ``ray.nodes()``."""
        return actor_demand(self._device_kind, self.num_cpus, self.resources, self.accelerator_type)

    def _launch(self) -> Any:
        """A new actor's handle (``ray_actor.EvaluationHost``)."""
        options = actor_options(
            self._device_kind,
            self.num_cpus,
            self.resources,
            self.accelerator_type,
            self.label_selector,
        )
        if self._remote_class is None:
            self._remote_class = self._ray.remote(EvaluationHost)
        return self._remote_class.options(**options).remote(
            self._device_kind, asdict(self.timeouts), self.measure_ceilings, self._demand()
        )

    def _job_limit(self) -> float:
        t = self.timeouts
        return t.build_s + t.run_s + t.startup_s + _IN_FLIGHT_MARGIN_S


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
