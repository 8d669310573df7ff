"""Where the Ray executor's actors go: what one asks of a node, how many the nodes hold, and
the fleet of actors, launched where the cluster has room, awaited and replaced when lost.

Names are those of ``ray.nodes()``: ``CPU``, ``GPU``, custom resources, and
``accelerator_type:H100``, the resource Ray gives every node with that GPU model.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kernelarena.evaluate.executors.jobs import Job


def actor_demand(
    device_kind: str,
    num_cpus: float,
    resources: Mapping[str, float],
    accelerator_type: str | None,
) -> dict[str, float]:
    """What one actor asks of a node."""
    demand = {"CPU": num_cpus, **resources}
    if device_kind == "cuda":
        demand["GPU"] = 1.0
    if accelerator_type:
        demand[f"accelerator_type:{accelerator_type}"] = 0.001  # what Ray itself asks
    return {name: amount for name, amount in demand.items() if amount > 0}


def actor_options(
    device_kind: str,
    num_cpus: float,
    resources: Mapping[str, float],
    accelerator_type: str | None,
    label_selector: Mapping[str, str],
) -> dict[str, Any]:
    """The options of an actor asking that much (``ray.remote(...).options``)."""
    options: dict[str, Any] = {
        "num_cpus": num_cpus,
        "num_gpus": 1 if device_kind == "cuda" else 0,
        # The driver retries jobs itself, on any actor; Ray restarting an actor in place would
        # hide the loss and run the job twice.
        "max_restarts": 0,
        "max_task_retries": 0,
    }
    if resources:
        options["resources"] = dict(resources)
    if accelerator_type:
        options["accelerator_type"] = accelerator_type
    if label_selector:
        options["label_selector"] = dict(label_selector)
    return options


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


def label_note(label_selector: Mapping[str, str]) -> str:
    return f" on nodes labelled {dict(label_selector)}" if label_selector else ""


@dataclass
class Actor:
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
    solution: str | None = None  # of its last job: the one its judge's sandbox serves


class ActorFleet:
    """The executor's actors: launched where the cluster has room, awaited, replaced when lost.

    ``launch`` makes a new actor's handle; ``on_ready`` is called for each actor that becomes
    ready, during ``start`` or later (a node that joined, an actor replaced), after its
    environment has joined ``environments``."""

    def __init__(
        self,
        ray: Any,
        launch: Callable[[], Any],
        demand: Mapping[str, float],
        label_selector: Mapping[str, str],
        startup_s: float,
        on_ready: Callable[[Actor], None],
    ) -> None:
        self.ray = ray
        self.actors: list[Actor] = []
        self.environments: list[dict[str, Any]] = []
        self._launch = launch
        self._demand = dict(demand)
        self._label_selector = dict(label_selector)
        self._startup_s = startup_s
        self._on_ready = on_ready
        self._start_failures = 0
        self._last_start_error = ""

    def start(self, count: int, join_grace_s: float) -> list[dict[str, Any]]:
        """Launch ``count`` actors and wait for the first to be ready, then ``join_grace_s``
        more for the others (those still starting join the run when they are ready)."""
        self.actors = [self._new_actor() for _ in range(count)]
        first_ready: float | None = None
        while True:
            starting = [a for a in self.actors if a.ready_ref is not None]
            if not starting:
                break
            now = time.monotonic()
            if first_ready is None and self.starved(now):
                self.raise_starved()
            if first_ready is not None and now - first_ready > join_grace_s:
                break
            done, _ = self.ray.wait([a.ready_ref for a in starting], num_returns=1, timeout=1.0)
            for actor in starting:
                if actor.ready_ref in done:
                    self.settle_start(actor)
            if first_ready is None and any(a.ready_ref is None for a in self.actors):
                first_ready = time.monotonic()
        return self.environments

    def stop(self) -> None:
        """Idle actors stop their judges cleanly; busy or starting ones are killed outright."""
        idle = [a for a in self.actors if a.job is None and a.ready_ref is None]
        stops = [a.handle.shutdown.remote() for a in idle]
        if stops:
            self.ray.wait(stops, num_returns=len(stops), timeout=30)
        for actor in self.actors:
            self.kill(actor)
        self.actors = []

    def live_nodes(self) -> list[dict[str, Any]]:
        return [n for n in self.ray.nodes() if n.get("Alive")]

    def settle_start(self, actor: Actor) -> None:
        ray = self.ray
        try:
            ready = ray.get(actor.ready_ref)
        except ray.exceptions.RayError as error:
            self._start_failures += 1
            self._last_start_error = str(error)
            if self._start_failures > max(3, 2 * len(self.actors)):
                raise RuntimeError(
                    f"Ray evaluation actors keep failing to start; the last error:\n{error}"
                ) from None
            self.retire(actor)
            return
        actor.ready_ref = None
        actor.environment = ready["environment"]
        actor.node_id = ready["node_id"]
        actor.device = ready["device"]
        self.environments.append(
            dict(
                actor.environment,
                device=actor.device,
                host=ready["host"],
                startup=ready.get("startup", {}),
            )
        )
        self._on_ready(actor)

    def retire(self, actor: Actor) -> None:
        """Kill an actor and start a replacement in its place (Ray puts it wherever there is room)."""
        self.kill(actor)
        self.actors[self.actors.index(actor)] = self._new_actor()

    def retire_dead_node_peers(self, node_id: str) -> None:
        """When a node is gone, replace its idle actors too, before they are handed a job."""
        if not node_id or any(n.get("NodeID") == node_id for n in self.live_nodes()):
            return
        for actor in list(self.actors):
            if actor.node_id == node_id and actor.job is None and actor.ready_ref is None:
                self.retire(actor)

    def kill(self, actor: Actor) -> None:
        # Fails when the actor is already dead or its node gone: nothing is left to kill then.
        with contextlib.suppress(Exception):
            self.ray.kill(actor.handle, no_restart=True)

    def starved(self, now: float) -> bool:
        """True when no actor is ready and the oldest starting one has waited past the limit."""
        if any(a.ready_ref is None for a in self.actors):
            return False
        oldest = min((a.started for a in self.actors), default=now)
        return now - oldest > self._startup_s

    def raise_starved(self) -> None:
        last = (
            f"; the last start failure:\n{self._last_start_error}" if self._last_start_error else ""
        )
        raise RuntimeError(
            f"no Ray evaluation actor became ready in {self._startup_s:g} s; each asks for "
            f"{self._demand}{label_note(self._label_selector)}, the cluster has "
            f"{self.ray.cluster_resources()}{last}"
        )

    def _new_actor(self) -> Actor:
        handle = self._launch()
        return Actor(handle=handle, started=time.monotonic(), ready_ref=handle.start.remote())
