"""File descriptors passed between the judge and a sandbox over their connection (a socket pair):
``SCM_RIGHTS`` messages sent right behind a request, through multiprocessing's own helpers. Kept
apart from ``arena`` so that the judge's side imports no torch (a worker starts its first sandbox
before it imports torch)."""

from __future__ import annotations

import socket
from multiprocessing.connection import Connection
from multiprocessing.reduction import recvfds, sendfds

# Descriptors per message (the kernel takes at most 253 in one).
_PER_MESSAGE = 64


def send_fds(conn: Connection, fds: list[int]) -> None:
    """Pass ``fds`` over ``conn``, behind whatever was sent on it before."""
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        for start in range(0, len(fds), _PER_MESSAGE):
            sendfds(sock, fds[start : start + _PER_MESSAGE])


def receive_fds(conn: Connection, count: int) -> list[int]:
    """The ``count`` descriptors ``send_fds`` passed, now this process's (the caller closes them).
    Read right after the message they follow: ``Connection.recv`` reads no further than its own
    message, so the next byte on the socket is the one that carries them."""
    received: list[int] = []
    with socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        while len(received) < count:
            received += recvfds(sock, min(_PER_MESSAGE, count - len(received)))
    return received
