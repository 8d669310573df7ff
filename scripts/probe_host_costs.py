"""Development aid: what the pieces of apply's hot path cost on this host, per call, with CUDA
tensors (128 x 4096 bf16): reading a tensor's device, shape and dtype, a dict lookup keyed on
them (as apply's generated lookup), the capture query, and allocations. Best of 5 loops.

    python scripts/probe_host_costs.py
"""

import time

import torch

x = torch.randn(128, 4096, dtype=torch.bfloat16, device="cuda")
w = torch.randn(4096, dtype=torch.bfloat16, device="cuda")
dev = x.device
entries = {(2, dev, x.shape, x.dtype, w.shape, w.dtype): 1}


def t(label, fn, n=200000):
    for _ in range(1000):
        fn()
    best = 1e9
    for _ in range(5):
        s = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - s) / n)
    print(f"{label:45} {best * 1e9:8.0f} ns")


t("x.device", lambda: x.device)
t("x.shape", lambda: x.shape)
t("x.dtype", lambda: x.dtype)
t("key lookup (2 tensors)", lambda: entries[(2, x.device, x.shape, x.dtype, w.shape, w.dtype)])
t("torch.cuda.is_current_stream_capturing()", torch.cuda.is_current_stream_capturing)
t("torch._C._cuda_isCurrentStreamCapturing()", torch._C._cuda_isCurrentStreamCapturing)
t("torch.empty_like(x)", lambda: torch.empty_like(x), 50000)
t(
    "torch.empty(shape, dtype, device)",
    lambda: torch.empty((128, 4096), dtype=torch.bfloat16, device=dev),
    50000,
)
t("torch.cuda.current_stream()", torch.cuda.current_stream, 50000)
