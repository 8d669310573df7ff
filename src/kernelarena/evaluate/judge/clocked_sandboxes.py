"""The judge's sandboxes with their share of each job on the job's stage clock (``stage_clock``).

Starting or reusing the sandbox that serves a solution is the ``sandbox_start`` phase (a new
one, the stage ``sandbox_start/new_sandbox``), and what follows until the checks is the ``build``.
Inside a new sandbox's stage, ``forks_at_start`` is the wait for the zygote's first forks (the
zygote importing torch) and ``sandbox_ready`` the wait for a started sandbox to say it is ready
(a fork making its CUDA context and raising its walls): what a run's first jobs wait for.
Each request to a sandbox is a nested stage named
``sandbox:<request>`` (``sandbox:eager``, ``sandbox:bind``, ``sandbox:time``): how long the judge
waited on the sandbox, apart from its own work in the same phase.
"""

from __future__ import annotations

import contextlib
from typing import Any

from kernelarena.evaluate.judge.stage_clock import JOB_STAGES
from kernelarena.evaluate.sandbox.sandboxes import Sandbox, Sandboxes


class ClockedSandboxes(Sandboxes):
    def for_solution(self, key: str) -> Sandbox:
        JOB_STAGES.switch("sandbox_start")
        current = self.current
        serving = current is not None and current.key == key and current.alive()
        # A new sandbox is the nested stage ``new_sandbox``: its count is the jobs that took one.
        with contextlib.nullcontext() if serving else JOB_STAGES.stage("new_sandbox"):
            sandbox = super().for_solution(key)
        JOB_STAGES.switch("build")
        clock_requests(sandbox)
        return sandbox

    def _forked(self) -> None:
        if self._forking is None:
            return
        with JOB_STAGES.stage("forks_at_start"):
            super()._forked()

    def _spawn(self) -> Sandbox:
        sandbox = super()._spawn()
        unclocked = sandbox.wait_ready

        def wait_ready(timeout: float) -> None:
            with JOB_STAGES.stage("sandbox_ready"):
                unclocked(timeout)

        setattr(sandbox, "wait_ready", wait_ready)  # noqa: B010  (as ``clock_requests``)
        return sandbox


def clock_requests(sandbox: Sandbox) -> None:
    """Each request of ``sandbox`` a nested stage from now on: its two halves, which ``request``
    and ``request_beside`` both go through, each in the stage (the judge's work between them in
    ``request_beside`` in the stage around it). On the instance: the sandboxes make their
    ``Sandbox`` objects themselves (``Sandboxes._spawn``), spares and forks alike."""
    if getattr(sandbox, "clocked", False):
        return
    send, receive = sandbox.send, sandbox.receive
    sent = ["?"]  # the request whose reply ``receive`` waits for

    def clocked_send(*message: Any, **keywords: Any) -> None:
        sent[0] = str(message[0]) if message else "?"
        with JOB_STAGES.stage(f"sandbox:{sent[0]}"):
            send(*message, **keywords)

    def clocked_receive(*arguments: Any, **keywords: Any) -> dict[str, Any]:
        with JOB_STAGES.stage(f"sandbox:{sent[0]}"):
            return receive(*arguments, **keywords)

    # mypy refuses assigning to a method
    setattr(sandbox, "send", clocked_send)  # noqa: B010
    setattr(sandbox, "receive", clocked_receive)  # noqa: B010
    setattr(sandbox, "clocked", True)  # noqa: B010
