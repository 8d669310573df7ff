"""What an attacker would reach on a user's machine, stood up by the tests: a command server on a
UNIX socket (tmux's, an IDE's, Docker's), one on an abstract socket, a TCP server on loopback.
Each records who reached it; the command servers write the file a client names, as a shell
behind such a socket would."""

from __future__ import annotations

import os
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class _Commands(socketserver.StreamRequestHandler):
    def handle(self) -> None:
        self.server.reached.append("connected")  # type: ignore[attr-defined]
        target = self.rfile.readline().decode().strip()
        if target:
            Path(target).write_text("written by a command server at a solution's request\n")
        self.wfile.write(b"done\n")


class _Unix(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    reached: list[str]


class _Tcp(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    reached: list[str]


@contextmanager
def serving(server: _Unix | _Tcp) -> Iterator[list[str]]:
    server.reached = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.reached
    finally:
        server.shutdown()
        server.server_close()


def command_server(folder: Path) -> tuple[_Unix, str]:
    path = folder / "commands.sock"
    return _Unix(str(path), _Commands), str(path)


def abstract_server() -> tuple[_Unix, str]:
    name = f"kernelarena-redteam-{os.getpid()}"
    return _Unix("\0" + name, _Commands), name


def loopback_server() -> tuple[_Tcp, int]:
    server = _Tcp(("127.0.0.1", 0), _Commands)
    port = server.server_address[1]
    assert isinstance(port, int)
    return server, port
