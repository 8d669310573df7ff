"""Development aid: the wall time a call of the Triton attention_decode in an eager loop (host
launch included, as apply ranks calls outside graph capture), for its plan and with PDL or the
fused merge turned off, at batch 1 (8k, 32k) and batch 8 (8k): 200 calls a round, the median of
7 rounds; and the host's time to submit 50 calls without waiting.

    python scripts/probe_decode_eager.py
"""

import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from probe_decode import Shape

from kernelarena.testing import build

mod = sys.modules[build("attention_decode_bf16", "triton", "cuda").fn.__module__]
dev = torch.device("cuda")
for batch, cache in ((1, 8192), (1, 32768), (8, 8192)):
    shape = Shape(batch, cache, False, dev)
    for label, kw in (
        ("plan", {}),
        ("no pdl", {"config": {"pdl": False}}),
        ("combine kernel", {"config": {"combine": "kernel"}}),
        ("no pdl, kernel", {"config": {"pdl": False, "combine": "kernel"}}),
    ):

        def call(i, shape=shape, kw=kw):
            s = i % shape.sets
            mod.launch(*shape.arguments[s], *shape.outputs[s], **kw)

        for i in range(5):
            call(i)
        torch.cuda.synchronize()
        res = []
        for _ in range(7):
            n = 200
            t0 = time.perf_counter()
            for i in range(n):
                call(i)
            torch.cuda.synchronize()
            res.append((time.perf_counter() - t0) / n * 1e6)
        # host only: time of the launches without the sync
        t0 = time.perf_counter()
        for i in range(50):
            call(i)
        host = (time.perf_counter() - t0) / 50 * 1e6
        torch.cuda.synchronize()
        res.sort()
        print(
            f"b{batch} {cache}: {label:16} eager {res[3]:8.1f} us a call, host submit {host:6.1f} us",
            flush=True,
        )
    del shape
    torch.cuda.empty_cache()
