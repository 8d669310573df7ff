"""The two hardware ceilings every report is held against, measured in the same run.

- ``copy_gbps``: a large device-to-device copy, counting bytes read plus bytes written.
- ``matmul_tflops``: a large bf16 matrix product on random data (float32 on CPU).
"""

from __future__ import annotations

import torch

from kernelarena.evaluate.sandbox.timing import time_cpu, time_cuda


def measure_ceilings(
    device: torch.device, *, copy_bytes: int = 1 << 29, matmul_size: int = 8192
) -> dict[str, float]:
    if device.type == "cuda":
        return _cuda_ceilings(device, copy_bytes, matmul_size)
    return _cpu_ceilings()


def _cuda_ceilings(device: torch.device, copy_bytes: int, size: int) -> dict[str, float]:
    copy_ms = _cuda_copy_ms(device, copy_bytes)
    matmul_ms = _cuda_matmul_ms(device, size)
    torch.cuda.empty_cache()
    return {
        "copy_gbps": 2 * copy_bytes / (copy_ms * 1e-3) / 1e9,
        "matmul_tflops": 2 * size**3 / (matmul_ms * 1e-3) / 1e12,
        "matmul_dtype_bits": 16.0,
    }


def _cuda_copy_ms(device: torch.device, copy_bytes: int) -> float:
    source = torch.randint(0, 255, (copy_bytes,), dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    timing = time_cuda(
        lambda _: target.copy_(source), device, warmup=3, max_iterations=20, flush_l2=False
    )
    return timing.median_ms


def _cuda_matmul_ms(device: torch.device, size: int) -> float:
    generator = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    b = torch.randn(size, size, device=device, dtype=torch.bfloat16, generator=generator)
    timing = time_cuda(
        lambda _: torch.mm(a, b), device, warmup=3, max_iterations=10, flush_l2=False
    )
    return timing.median_ms


def _cpu_ceilings() -> dict[str, float]:
    elements = 1 << 24
    source = torch.rand(elements)
    target = torch.empty_like(source)
    copy = time_cpu(lambda _: target.copy_(source), max_iterations=20)
    a = torch.rand(1024, 1024)
    b = torch.rand(1024, 1024)
    matmul = time_cpu(lambda _: torch.mm(a, b), max_iterations=20)
    return {
        "copy_gbps": 2 * elements * 4 / (copy.median_ms * 1e-3) / 1e9,
        "matmul_tflops": 2 * 1024**3 / (matmul.median_ms * 1e-3) / 1e12,
        "matmul_dtype_bits": 32.0,
    }
