"""A Llama-style model from ``transformers`` (random weights, nothing downloaded), timed with apply off
and on: milliseconds per forward pass and tokens per second, and which solution apply chose for each
of the model's shapes.

Apply off is the stock model (``transformers``' RMSNorm, MLP and SDPA attention). Apply on routes
three of its operators through ``kernelarena.ops``, which dispatch through apply to the fastest
measured solution for the shape at hand on this GPU (``docs/apply.md``):

- every ``LlamaRMSNorm`` to ``rmsnorm``;
- every ``LlamaMLP``'s ``silu(x @ gate^T) * (x @ up^T)`` to ``gated_mlp`` (its down projection
  stays a ``torch.nn.Linear``);
- attention to ``attention_prefill`` (causal; registered as ``transformers`` attention
  implementation ``kernelarena``).

Everything else (embedding, projections, rotary embedding, LM head) is the same code either way.
The two settings alternate round by round, so drift of the machine falls on both alike.

On a GPU (the default: Llama-3-8B's layer shapes, 4 layers, bfloat16, one sequence of 4096
tokens):

    python examples/llama_apply.py
    kernelarena report rmsnorm gated_mlp attention_prefill --model-run benchmarks/results/llama_apply_<gpu>_<date>.json -o llama.html

The result goes to ``benchmarks/results/llama_apply_<device>_<date>.json`` (device, versions, date,
every sample). Without a GPU, ``--smoke`` runs a tiny configuration on the CPU, where
apply runs each operator's torch solution (nothing is measured on a CPU): a check that the
plumbing works, not a figure.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import types
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.harness import environment, result_path

import kernelarena
import kernelarena.ops as ops

CALLS: Counter[str] = Counter()  # operator -> calls routed through kernelarena.ops

GPU_CONFIG = dict(  # Llama-3-8B's layer shapes, fewer layers, a smaller vocabulary
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_attention_heads=32,
    num_key_value_heads=8,
    num_hidden_layers=4,
    max_position_embeddings=8192,
)
SMOKE_CONFIG = dict(  # head_dim 64: attention_prefill takes 64 or 128
    vocab_size=256,
    hidden_size=256,
    intermediate_size=512,
    num_attention_heads=4,
    num_key_value_heads=2,
    num_hidden_layers=2,
    max_position_embeddings=256,
)


def rms_norm_forward(self: Any, hidden_states: torch.Tensor) -> torch.Tensor:
    CALLS["rmsnorm"] += 1
    rows = hidden_states.reshape(-1, hidden_states.shape[-1])
    return ops.rmsnorm(rows, self.weight, self.variance_epsilon).view_as(hidden_states)


def mlp_forward(self: Any, x: torch.Tensor) -> torch.Tensor:
    CALLS["gated_mlp"] += 1
    rows = x.reshape(-1, x.shape[-1])
    gated = ops.gated_mlp(rows, self.gate_proj.weight, self.up_proj.weight)
    return self.down_proj(gated).view(*x.shape[:-1], -1)


def attention_forward(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Causal prefill attention on [batch, heads, seq, head_dim]; ``transformers`` passes no mask
    to an implementation it does not know, so a padded batch would be wrong here: this example
    runs unpadded sequences without a KV cache only."""
    if attention_mask is not None or key.shape[2] != query.shape[2]:
        raise ValueError("attention_forward: unpadded prefill without a KV cache only")
    CALLS["attention_prefill"] += 1
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    out, _ = ops.attention_prefill(query, key, value, float(scale), True)  # any strides
    return out.transpose(1, 2), None  # [batch, seq, heads, head_dim], as transformers expects


@contextmanager
def routed_through_kernelarena(model: Any) -> Iterator[None]:
    """Inside: the model's norms, MLPs and attention call kernelarena.ops; outside: stock."""
    from transformers.models.llama.modeling_llama import LlamaMLP, LlamaRMSNorm

    patched = []
    for module in model.modules():
        if isinstance(module, LlamaRMSNorm):
            module.forward = types.MethodType(rms_norm_forward, module)
            patched.append(module)
        elif isinstance(module, LlamaMLP):
            module.forward = types.MethodType(mlp_forward, module)
            patched.append(module)
    stock = model.config._attn_implementation
    model.set_attn_implementation("kernelarena")
    try:
        yield
    finally:
        for module in patched:
            del module.forward  # the class's own forward again
        model.set_attn_implementation(stock)


def build_model(smoke: bool, device: torch.device, dtype: torch.dtype) -> Any:
    from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

    AttentionInterface.register("kernelarena", attention_forward)
    config = LlamaConfig(**(SMOKE_CONFIG if smoke else GPU_CONFIG), attn_implementation="sdpa")
    assert config.hidden_act == "silu" and not config.mlp_bias  # what gated_mlp computes
    torch.manual_seed(0)
    with device:
        model = LlamaForCausalLM(config).to(dtype).eval()
    return model


def time_forward(model: Any, tokens: torch.Tensor, repeats: int) -> list[float]:
    """Milliseconds of each of ``repeats`` forward passes (CUDA events on a GPU)."""
    samples = []
    with torch.no_grad():
        for _ in range(repeats):
            if tokens.is_cuda:
                start, end = (
                    torch.cuda.Event(enable_timing=True),
                    torch.cuda.Event(enable_timing=True),
                )
                start.record()
                model(input_ids=tokens, use_cache=False)
                end.record()
                end.synchronize()
                samples.append(start.elapsed_time(end))
            else:
                began = time.perf_counter()
                model(input_ids=tokens, use_cache=False)
                samples.append((time.perf_counter() - began) * 1e3)
    return samples


def apply_choices(runtime: Any, device: torch.device, calls: Counter[str]) -> list[dict[str, Any]]:
    """What apply runs for each shape the model called (recorded while tracing): the first of the
    table's choice that builds here, as apply does, else the fallback."""
    from kernelarena.dispatch.table import shape_key

    chosen = []
    for name, workload in runtime.recorder.recorded:
        definition = runtime.trace_set.definitions[name]
        table = runtime.table(definition, device, "eager")
        choice = table.choose(shape_key(definition, workload.axes))
        runs = next((s for s in choice.solutions if runtime.runnable(definition, s, device)), None)
        family = next((t[7:] for t in definition.tags if t.startswith("family:")), name)
        chosen.append(
            dict(
                definition=name,
                axes=dict(workload.axes),
                solution=runs,
                reason=choice.reason if runs else "fallback",
                measured_key=list(choice.measured_key) if choice.measured_key else None,
                borrowed_from=table.borrowed_from,
                calls_per_forward=calls.get(family, 0),
            )
        )
    return chosen


def summarize(samples: list[float]) -> dict[str, Any]:
    """Median and 20th/80th percentiles, with every sample."""
    median = statistics.median(samples)
    p20, _, _, p80 = (
        statistics.quantiles(samples, n=5, method="inclusive") if len(samples) > 1 else [median] * 4
    )
    return dict(median_ms=median, p20_ms=p20, p80_ms=p80, samples_ms=samples)


def measure(arguments: argparse.Namespace) -> dict[str, Any]:
    device = torch.device("cpu" if arguments.smoke else "cuda")
    dtype = getattr(torch, arguments.dtype)
    model = build_model(arguments.smoke, device, dtype)
    generator = torch.Generator().manual_seed(1)
    shape = (arguments.batch, arguments.seq)
    tokens = torch.randint(0, model.config.vocab_size, shape, generator=generator).to(device)
    dataset = arguments.dataset or Path(tempfile.mkdtemp(prefix="llama-apply-shapes-"))
    with torch.no_grad():
        plain = model(input_ids=tokens, use_cache=False).logits
        # First forward with apply on: records the model's shapes and builds the winners.
        tracing = kernelarena.enable_apply(dataset, trace=True)
        with routed_through_kernelarena(model):
            CALLS.clear()
            applied = model(input_ids=tokens, use_cache=False).logits
        choices = apply_choices(tracing, device, CALLS)
        difference = (applied.float() - plain.float()).abs().max().item()
        routed = sum(CALLS.values())
        model(input_ids=tokens, use_cache=False)
        assert sum(CALLS.values()) == routed, "the stock model still calls kernelarena"
    kernelarena.enable_apply(dataset)  # the same tables, without recording
    samples: dict[str, list[float]] = {"apply off": [], "apply on": []}
    for _ in range(arguments.rounds):
        samples["apply off"] += time_forward(model, tokens, arguments.repeats)
        with routed_through_kernelarena(model):
            samples["apply on"] += time_forward(model, tokens, arguments.repeats)
    warm = arguments.repeats  # the first round of each warms caches and allocator: left out
    return dict(
        model=dict(
            name=type(model).__name__,
            dtype=str(dtype).removeprefix("torch."),
            parameters=sum(p.numel() for p in model.parameters()),
            **{k: v for k, v in model.config.to_dict().items() if k in GPU_CONFIG},
        ),
        tokens_per_forward=arguments.batch * arguments.seq,
        timings={k: summarize(v[warm:] or v) for k, v in samples.items()},
        max_abs_logit_difference=difference,
        choices=choices,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--smoke", action="store_true", help="tiny model on the CPU: a plumbing check"
    )
    parser.add_argument("--batch", type=int, default=None, help="sequences per forward (default 1)")
    parser.add_argument(
        "--seq", type=int, default=None, help="tokens per sequence (default 4096; smoke 8)"
    )
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument(
        "--rounds", type=int, default=None, help="alternations off/on (default 6; smoke 2)"
    )
    parser.add_argument(
        "--repeats", type=int, default=None, help="forwards per round (default 5; smoke 1)"
    )
    parser.add_argument(
        "--dataset",
        type=Path,
        help="dataset whose traces join the library's; the "
        "model's shapes are recorded into it (default: a new temporary folder)",
    )
    parser.add_argument("--output", type=Path, help="result JSON (default benchmarks/results/...)")
    arguments = parser.parse_args()
    if not arguments.smoke and not torch.cuda.is_available():
        parser.error("no GPU here: run with --smoke for the tiny CPU check")
    defaults = (1, 8, 2, 1) if arguments.smoke else (1, 4096, 6, 5)
    for name, default in zip(("batch", "seq", "rounds", "repeats"), defaults, strict=True):
        setattr(arguments, name, getattr(arguments, name) or default)
    result = measure(arguments)
    import transformers

    env = environment(torch.device("cpu" if arguments.smoke else "cuda"))
    env["transformers"] = transformers.__version__
    report = dict(benchmark="llama_apply", environment=env, **result)
    path = arguments.output or result_path(
        "llama_apply" + ("_smoke" if arguments.smoke else ""), env
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
    for label, timing in report["timings"].items():
        rate = report["tokens_per_forward"] / (timing["median_ms"] / 1e3)
        print(
            f"{label}: {timing['median_ms']:.3f} ms per forward "
            f"(p20-p80 {timing['p20_ms']:.3f}-{timing['p80_ms']:.3f}), {rate:,.0f} tokens/s"
        )
    for choice in report["choices"]:
        print(
            f"  {choice['definition']} {choice['axes']}: {choice['solution'] or 'fallback'} "
            f"({choice['reason']})"
        )
    print(f"max |logit difference| {report['max_abs_logit_difference']:.3g}; wrote {path}")


if __name__ == "__main__":
    main()
