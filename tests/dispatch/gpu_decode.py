"""A tiny Llama-like decode step built from kernelarena.ops (rmsnorm, attention_decode,
silu_and_mul; matmuls in torch), run in a CUDA graph, for the GPU tests.

Random weights, bfloat16, 2 layers, a KV cache filled to ``PROMPT`` positions; each step writes
one position per sequence and samples greedily. The residual updates are scaled down and the
logits are read through a fixed permutation of the (row-normalized) embedding, so each next token
is decided by a wide margin: the tokens do not depend on which correct kernel ran, while the
final hidden state (compared with a tolerance) does see every kernel.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

import kernelarena
import kernelarena.ops as ops
from kernelarena.runtime.capture import collector_paused

BATCH, HIDDEN, Q_HEADS, KV_HEADS, HEAD_DIM = 4, 1024, 8, 2, 128
INTERMEDIATE, VOCAB, LAYERS, MAX_SEQ, PROMPT, STEPS = 2816, 2048, 2, 256, 32, 16
EPS = 1e-6


@dataclass
class Decoded:
    tokens: list[list[int]]
    hidden: torch.Tensor  # after the last step
    ms_per_step: float


class Model:
    def __init__(self, device: torch.device) -> None:
        generator = torch.Generator(device=device).manual_seed(0)

        def draw(*shape: int, scale: float = 1.0) -> torch.Tensor:
            values = torch.randn(*shape, generator=generator, device=device) * scale
            return values.to(torch.bfloat16)

        embedding = torch.randn(VOCAB, HIDDEN, generator=generator, device=device)
        self.embedding = (embedding / embedding.norm(dim=-1, keepdim=True) * 8).bfloat16()
        self.readout = self.embedding[torch.randperm(VOCAB, generator=generator, device=device)]
        qkv = (Q_HEADS + 2 * KV_HEADS) * HEAD_DIM
        self.layers = [
            {
                "attention_norm": draw(HIDDEN, scale=0.1) + 1,
                "qkv": draw(HIDDEN, qkv, scale=HIDDEN**-0.5),
                "out": draw(Q_HEADS * HEAD_DIM, HIDDEN, scale=0.05 * HIDDEN**-0.5),
                "mlp_norm": draw(HIDDEN, scale=0.1) + 1,
                "gate_up": draw(HIDDEN, 2 * INTERMEDIATE, scale=HIDDEN**-0.5),
                "down": draw(INTERMEDIATE, HIDDEN, scale=0.05 * INTERMEDIATE**-0.5),
                "k_cache": draw(BATCH, KV_HEADS, MAX_SEQ, HEAD_DIM),
                "v_cache": draw(BATCH, KV_HEADS, MAX_SEQ, HEAD_DIM),
            }
            for _ in range(LAYERS)
        ]
        self.final_norm = draw(HIDDEN, scale=0.1) + 1

    def step(
        self, tokens: torch.Tensor, position: torch.Tensor, seq_lens: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(next tokens, final hidden state): one decode step; ``position`` [1] int64 (where
        this step's K and V go), ``seq_lens`` [BATCH] int32 (position + 1), both on the GPU."""
        hidden = self.embedding[tokens]
        for layer in self.layers:
            normed = ops.rmsnorm(hidden, layer["attention_norm"], EPS)
            q, k, v = (normed @ layer["qkv"]).split(
                [Q_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM], dim=-1
            )
            for cache, new in ((layer["k_cache"], k), (layer["v_cache"], v)):
                cache.index_copy_(2, position, new.view(BATCH, KV_HEADS, 1, HEAD_DIM))
            o, _ = ops.attention_decode(
                q.reshape(BATCH, Q_HEADS, HEAD_DIM).contiguous(),
                layer["k_cache"],
                layer["v_cache"],
                seq_lens,
                HEAD_DIM**-0.5,
            )
            hidden = hidden + o.reshape(BATCH, -1) @ layer["out"]
            gated = ops.silu_and_mul(ops.rmsnorm(hidden, layer["mlp_norm"], EPS) @ layer["gate_up"])
            hidden = hidden + gated @ layer["down"]
        final = ops.rmsnorm(hidden, self.final_norm, EPS)
        logits = final.float() @ self.readout.float().t()
        return logits.argmax(dim=-1), hidden


def decode_in_graphs(apply_dataset: Path | None) -> Decoded:
    """``STEPS`` decode steps replayed from one captured step, apply on (``apply_dataset``: the
    user dataset folder, the library's traces with it) or off."""
    if apply_dataset is None:
        kernelarena.disable_apply()
    else:
        kernelarena.enable_apply(apply_dataset)
    device = torch.device("cuda")
    model = Model(device)
    tokens = torch.arange(BATCH, device=device) * 7 % VOCAB
    position = torch.full((1,), PROMPT, dtype=torch.int64, device=device)
    seq_lens = torch.full((BATCH,), PROMPT + 1, dtype=torch.int32, device=device)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up steps, as a serving engine runs before capturing
        for _ in range(3):
            model.step(tokens, position, seq_lens)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with collector_paused(), torch.cuda.graph(graph):
        next_tokens, hidden = model.step(tokens, position, seq_lens)
    produced: list[list[int]] = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    elapsed = 0.0
    for step in range(STEPS):
        position.fill_(PROMPT + step)
        seq_lens.fill_(PROMPT + step + 1)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        elapsed += start.elapsed_time(end)
        produced.append(next_tokens.tolist())
        tokens.copy_(next_tokens)
    kernelarena.disable_apply()
    return Decoded(produced, hidden.clone(), elapsed / STEPS)
