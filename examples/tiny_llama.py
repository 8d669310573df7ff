"""A tiny Llama-style model, random weights, whose norms and activation go through kernelarena.apply.

Its RMSNorm, residual-add + RMSNorm and SiLU-and-mul are plain PyTorch functions decorated with
``@kernelarena.apply(<family>)``: with apply off they run as written; with apply on each call goes
to the fastest measured solution for its dtype and shape on this GPU (or to the default solution
when nothing was measured); with tracing on, the first call of every shape is recorded as a
workload of the dataset, ready for ``kernelarena run``:

    python examples/tiny_llama.py --dataset /tmp/llama-shapes
    kernelarena run rmsnorm fused_add_rmsnorm silu_and_mul --dataset /tmp/llama-shapes --suite all

Attention is torch's scaled_dot_product_attention (causal, grouped-query).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

import kernelarena


@kernelarena.apply("rmsnorm")
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    rstd = torch.rsqrt(xf.square().mean(-1, keepdim=True) + eps)
    return (xf * rstd * weight.float()).to(x.dtype)


@kernelarena.apply("fused_add_rmsnorm")
def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    total = (x.float() + residual.float()).to(x.dtype)
    return rms_norm(total, weight, eps), total


@kernelarena.apply("silu_and_mul")
def silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    gate, up = x.float().chunk(2, dim=-1)
    return (nn.functional.silu(gate) * up).to(x.dtype)


@dataclass(frozen=True)
class Config:
    vocab: int = 256
    hidden: int = 64
    intermediate: int = 160
    heads: int = 4
    kv_heads: int = 2
    layers: int = 2
    eps: float = 1e-6
    rope_theta: float = 10000.0


def rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotary position embedding of x [tokens, heads, head_dim] (halves rotated, as Llama does)."""
    half = x.shape[-1] // 2
    frequencies = theta ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    angles = (positions[:, None].float() * frequencies[None, :])[:, None, :]  # [tokens, 1, half]
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * cos - second * sin, second * cos + first * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        head_dim = config.hidden // config.heads
        self.input_norm = nn.Parameter(torch.ones(config.hidden))
        self.post_norm = nn.Parameter(torch.ones(config.hidden))
        self.qkv = nn.Linear(config.hidden, (config.heads + 2 * config.kv_heads) * head_dim, False)
        self.o = nn.Linear(config.heads * head_dim, config.hidden, bias=False)
        self.gate_up = nn.Linear(config.hidden, 2 * config.intermediate, bias=False)
        self.down = nn.Linear(config.intermediate, config.hidden, bias=False)

    def attention(self, x: torch.Tensor, batch: int, seq: int) -> torch.Tensor:
        c = self.config
        head_dim = c.hidden // c.heads
        q, k, v = self.qkv(x).split(
            [c.heads * head_dim, c.kv_heads * head_dim, c.kv_heads * head_dim], -1
        )
        positions = torch.arange(seq, device=x.device).repeat(batch)
        q = rotate(q.view(-1, c.heads, head_dim), positions, c.rope_theta)
        k = rotate(k.view(-1, c.kv_heads, head_dim), positions, c.rope_theta)
        q, k, v = (
            t.reshape(batch, seq, -1, head_dim).transpose(1, 2) for t in (q, k, v.view_as(k))
        )
        out = nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=c.heads != c.kv_heads
        )
        return self.o(out.transpose(1, 2).reshape(batch * seq, -1))

    def forward(
        self, h: torch.Tensor, residual: torch.Tensor | None, batch: int, seq: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        eps = self.config.eps
        if residual is None:
            residual, normed = h, rms_norm(h, self.input_norm, eps)
        else:
            normed, residual = add_rms_norm(h, residual, self.input_norm, eps)
        h = self.attention(normed, batch, seq)
        normed, residual = add_rms_norm(h, residual, self.post_norm, eps)
        return self.down(silu_and_mul(self.gate_up(normed))), residual


class TinyLlama(nn.Module):
    def __init__(self, config: Config) -> None:
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab, config.hidden)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.layers))
        self.final_norm = nn.Parameter(torch.ones(config.hidden))
        self.head = nn.Linear(config.hidden, config.vocab, bias=False)
        for parameter in self.parameters():  # random weights, scaled to keep activations tame
            if parameter.dim() > 1:
                nn.init.normal_(parameter, std=1 / math.sqrt(parameter.shape[-1]))

    @torch.no_grad()
    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        batch, seq = tokens.shape
        h, residual = self.embed(tokens).reshape(batch * seq, -1), None
        for block in self.blocks:
            h, residual = block(h, residual, batch, seq)
        assert residual is not None
        out, _ = add_rms_norm(h, residual, self.final_norm, self.config.eps)
        return self.head(out).view(batch, seq, -1)


def build(
    config: Config | None = None, dtype: torch.dtype = torch.float32, seed: int = 0
) -> TinyLlama:
    torch.manual_seed(seed)
    return TinyLlama(config or Config()).to(dtype).eval()


def run_shapes(
    model: TinyLlama, shapes: list[tuple[int, int]], seed: int = 1
) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    return [
        model(torch.randint(0, model.config.vocab, shape, generator=generator).to(device))
        for shape in shapes
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, required=True, help="folder the workloads go to")
    parser.add_argument("--tensors", action="store_true", help="save the input tensors too")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    arguments = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build(dtype=getattr(torch, arguments.dtype)).to(device)
    shapes = [(1, 8), (2, 8), (1, 8), (1, 32)]  # (batch, sequence); the repeat is recorded once
    kernelarena.disable_apply()
    plain = run_shapes(model, shapes)
    runtime = kernelarena.enable_apply(
        arguments.dataset, trace=True, trace_tensors=arguments.tensors
    )
    applied = run_shapes(model, shapes)
    worst = max(
        (a.float() - p.float()).abs().max().item() for a, p in zip(applied, plain, strict=True)
    )
    assert runtime.recorder is not None
    print(f"logits with apply on vs off: max |difference| {worst:.3g}")
    print(f"{len(runtime.recorder.recorded)} new workloads in {arguments.dataset}:")
    for definition, workload in runtime.recorder.recorded:
        print(f"  {definition:28s} {workload.axes}")


if __name__ == "__main__":
    main()
