"""The tags of the messages between the executor and a worker (a judge) over their pipe.

The executor sends ``(JOB, id, payload)`` and, at the end, ``(STOP,)``; the worker answers
``(READY, environment, startup)`` once, ``(STAGE, id, stage)`` when a job's solution is built (the
job's run timeout starts then), ``(RESULT, id, result)`` per job, and ``(CLOSED,)`` as it exits.
A string enum: a tag compares equal to its text, so either side may log or match it as one.
"""

from __future__ import annotations

from enum import Enum


class Message(str, Enum):
    JOB = "job"
    STOP = "stop"
    READY = "ready"
    STAGE = "stage"
    RESULT = "result"
    CLOSED = "closed"
