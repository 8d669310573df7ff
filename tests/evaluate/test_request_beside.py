"""``Sandbox.request_beside``: the judge's own work runs while the sandbox works on the request,
and the reply is read even where that work fails, so the next request gets its own reply."""

from __future__ import annotations

import json
import threading
from multiprocessing import Pipe
from multiprocessing.connection import Connection

import pytest

from kernelarena.evaluate.sandbox.sandboxes import Sandbox


def _sandbox_answering(conn: Connection, beside_ran: threading.Event, requests: int) -> None:
    """A stand-in for a sandbox's process: each reply says whether the judge's work had begun
    before the sandbox answered (it waits a while for it to)."""
    for _ in range(requests):
        message = conn.recv()
        began = beside_ran.wait(timeout=5.0)
        conn.send_bytes(json.dumps({"ok": True, "echo": list(message), "beside": began}).encode())


def _stand_in(requests: int) -> tuple[Sandbox, threading.Event, threading.Thread]:
    ours, theirs = Pipe()
    sandbox = object.__new__(Sandbox)
    sandbox.conn, sandbox.role = ours, "solution"
    beside_ran = threading.Event()
    answering = threading.Thread(
        target=_sandbox_answering, args=(theirs, beside_ran, requests), daemon=True
    )
    answering.start()
    return sandbox, beside_ran, answering


def test_the_judges_work_runs_while_the_sandbox_works_on_the_request() -> None:
    sandbox, beside_ran, answering = _stand_in(requests=1)

    def beside() -> str:
        beside_ran.set()
        return "expected outputs"

    reply, done = sandbox.request_beside(("eager", [3, 4], 2), beside)
    answering.join(timeout=5.0)
    assert done == "expected outputs"
    assert reply == {"ok": True, "echo": ["eager", [3, 4], 2], "beside": True}


def test_a_failure_beside_the_request_leaves_no_reply_for_the_next_request() -> None:
    sandbox, beside_ran, answering = _stand_in(requests=2)

    def failing() -> None:
        beside_ran.set()
        raise RuntimeError("the reference failed")

    with pytest.raises(RuntimeError, match="the reference failed"):
        sandbox.request_beside(("eager", [1], 1), failing)
    assert sandbox.request("forget", [1])["echo"] == ["forget", [1]]
    answering.join(timeout=5.0)


def test_on_the_stage_clock_the_work_beside_is_its_own_stage_not_the_sandboxs() -> None:
    from kernelarena.evaluate.judge.clocked_sandboxes import clock_requests
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES, staged

    sandbox, beside_ran, answering = _stand_in(requests=1)
    clock_requests(sandbox)

    @staged("expected")
    def beside() -> None:
        beside_ran.set()

    JOB_STAGES.begin("timing")
    sandbox.request_beside(("eager", [1], 1), beside)
    stages = JOB_STAGES.take()
    answering.join(timeout=5.0)
    assert {"timing/sandbox:eager", "timing/expected"} <= set(stages), stages
    assert not any(path.startswith("timing/sandbox:eager/") for path in stages), stages


def test_on_the_stage_clock_a_plain_request_is_its_stage() -> None:
    from kernelarena.evaluate.judge.clocked_sandboxes import clock_requests
    from kernelarena.evaluate.judge.stage_clock import JOB_STAGES

    sandbox, beside_ran, answering = _stand_in(requests=1)
    clock_requests(sandbox)
    beside_ran.set()
    JOB_STAGES.begin("checks")
    assert sandbox.request("eager", [1], 1)["ok"] is True
    stages = JOB_STAGES.take()
    answering.join(timeout=5.0)
    assert "checks/sandbox:eager" in stages, stages
