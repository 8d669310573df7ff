"""A stand-in for a sandbox's side of the arena, for tests: run as
``python -m tests.evaluate.arena_peer FD DEVICE`` (under ``unshare`` for a separate PID namespace).

It receives one message on the connection FD, ``(described, layouts, fill)``, and the descriptors
behind it, maps the buffers as a sandbox does (``arena.open_buffers``), reads every tensor of the
layouts, fills them with ``fill``, tries to shrink the first buffer's descriptor (a memfd must
refuse), and answers JSON: its pid namespace, the sums it read, what the shrink did.
"""

from __future__ import annotations

import json
import os
import sys
from multiprocessing.connection import Connection


def _try_shrink(fd: int) -> str:
    """What ``ftruncate`` to 0 does to the buffer behind ``fd`` (a copy of the descriptor)."""
    try:
        os.ftruncate(fd, 0)
    except OSError as error:
        return f"refused: {error.strerror}"
    finally:
        os.close(fd)
    return "shrunk"


def main(fd: int, device_name: str) -> None:
    conn = Connection(fd)
    import torch

    from kernelarena.evaluate.sandbox.arena import open_buffers, view_layout
    from kernelarena.evaluate.sandbox.descriptors import receive_fds

    device = torch.device(device_name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
        torch.cuda.synchronize(device)
    described, layouts, fill = conn.recv()
    count = sum(1 for kind, _, _, _ in described.values() if kind != "cuda_ipc")
    fds = receive_fds(conn, count)
    shrink = _try_shrink(os.dup(fds[0])) if device.type == "cpu" and fds else "not tried"
    opened = open_buffers(device, described, fds)
    buffers = {buffer_id: buffer for buffer_id, (buffer, _) in opened.items()}
    sums = []
    for layout in layouts:
        for tensor in view_layout(buffers, layout):
            sums.append(float(tensor.double().sum().item()))
            tensor.fill_(fill)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    reply = {"namespace": os.readlink("/proc/self/ns/pid"), "sums": sums, "shrink": shrink}
    conn.send_bytes(json.dumps(reply).encode())
    conn.recv()  # hold the mappings until the judge has checked what was written


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
