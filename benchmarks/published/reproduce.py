"""Run one published torch-binding solution and its definition's reference, as a user would.

No kernelarena and no flashinfer-bench here: the solution's sources are written to a folder and
built with ``torch.utils.cpp_extension.load``, its entry point is called on random inputs (standard
normal, seeded, as both tools draw them) and so is the definition's reference, on the same inputs.
For each workload and trial it prints the largest errors and the elements out of tolerance under
both tools' rules:

- kernelarena: ``|out - ref| <= atol * scale + rtol * |ref|`` on every element, with the
  definition's ``tolerances`` or, where it declares none (the published ones do not), the default
  of the output's dtype (``DEFAULT_TOLERANCES`` in kernelarena.data.definition, copied below),
  whose ``scale`` is the reference output's RMS where above 1;
- flashinfer-bench 0.1.2: an element fails only when ``|out - ref| > atol`` and
  ``|out - ref| / |ref| > rtol``, atol = rtol = 1e-2 by default.

It also says whether an input changed, whether a repeated call gives the same output, and, with
``--capture``, what capturing one call in a CUDA graph does (kernelarena times short calls as
graph replays). So a mismatch kernelarena reports can be shown to hold outside it, or not. A
solution that exits the process on a CUDA error (some published ones do) ends this script there,
after printing its own message.

    python benchmarks/published/reproduce.py NAME --dataset .fib-published [--workload UUID]
    python benchmarks/published/reproduce.py SOLUTION.json --definition DEF.json --workloads W.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from torch.utils.cpp_extension import load

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
# kernelarena's defaults by output dtype, (atol, rtol), where a definition declares no tolerances.
KERNELARENA_DEFAULTS = {"float32": (1e-4, 1e-4), "float16": (1e-3, 1e-3), "bfloat16": (1e-2, 1e-2)}
PEER_ATOL = PEER_RTOL = 1e-2
SOURCE_SUFFIXES = (".cu", ".cpp", ".cc", ".cxx", ".c")
DEVICE = "cuda"  # --device cpu runs a C++-only solution, to try this script without a GPU


def find_files(arguments: argparse.Namespace) -> tuple[dict, dict, list[dict]]:
    """The solution, its definition and its workloads, from paths or from a dataset folder."""
    if arguments.dataset:
        root = arguments.dataset
        matches = [p for p in (root / "solutions").rglob("*.json") if p.stem == arguments.solution]
        path = Path(arguments.solution) if Path(arguments.solution).is_file() else matches[0]
        solution = json.loads(path.read_text())
        name = solution["definition"]
        definition_path = next((root / "definitions").rglob(f"{name}.json"))
        workloads_path = next((root / "workloads").rglob(f"{name}.jsonl"))
    else:
        solution = json.loads(Path(arguments.solution).read_text())
        definition_path, workloads_path = arguments.definition, arguments.workloads
    definition = json.loads(Path(definition_path).read_text())
    lines = [json.loads(line) for line in Path(workloads_path).read_text().splitlines() if line]
    workloads = [line["workload"] for line in lines]
    if arguments.workload:
        workloads = [w for w in workloads if w["uuid"] in arguments.workload]
    return solution, definition, workloads


def build(solution: dict, folder: Path) -> Any:
    for source in solution["sources"]:
        (folder / source["path"]).parent.mkdir(parents=True, exist_ok=True)
        (folder / source["path"]).write_text(source["content"])
    sources = [str(folder / s["path"]) for s in solution["sources"]]
    digest = hashlib.sha256(json.dumps(solution["sources"]).encode()).hexdigest()[:8]
    module_name = re.sub(r"\W", "_", f"repro_{solution['name']}_{digest}")
    started = time.perf_counter()
    try:
        module = load(
            name=module_name,
            sources=[s for s in sources if s.endswith(SOURCE_SUFFIXES)],
            extra_include_paths=[str(folder)],
            build_directory=str(folder),
            with_cuda=solution["spec"]["language"] == "cuda",
        )
    except RuntimeError as error:  # torch puts the compiler's whole output in the message
        said = [line for line in str(error).splitlines() if "error" in line.lower()]
        raise SystemExit(f"{solution['name']} does not build here:\n" + "\n".join(said)) from None
    print(f"built {solution['name']} in {time.perf_counter() - started:.1f} s")
    return getattr(module, solution["spec"]["entry_point"].split("::")[-1])


def axis_values(definition: dict, workload: dict) -> dict[str, int]:
    values = {n: a["value"] for n, a in definition["axes"].items() if a.get("type") == "const"}
    return values | workload["axes"]


def make_inputs(definition: dict, workload: dict, seed: int) -> dict[str, torch.Tensor]:
    axes = axis_values(definition, workload)
    generator = torch.Generator(device=DEVICE).manual_seed(seed)
    inputs = {}
    for name, spec in definition["inputs"].items():
        shape = [axes[axis] for axis in spec["shape"] or []]
        dtype = DTYPES[spec["dtype"]]
        inputs[name] = torch.randn(shape, generator=generator, device=DEVICE, dtype=dtype)
    return inputs


def new_outputs(definition: dict, workload: dict) -> list[torch.Tensor]:
    """NaN-filled, so that an element the solution never writes cannot pass."""
    axes = axis_values(definition, workload)
    outputs = []
    for spec in definition["outputs"].values():
        shape = [axes[axis] for axis in spec["shape"]]
        dtype = DTYPES[spec["dtype"]]
        outputs.append(torch.full(shape, float("nan"), device=DEVICE, dtype=dtype))
    return outputs


def call(entry: Any, solution: dict, definition: dict, workload: dict, inputs: dict) -> list:
    """The solution's outputs, in the style its spec declares (destination passing unless it
    says ``destination_passing_style: false``, FlashInfer-Trace's default)."""
    arguments = list(inputs.values())
    if solution["spec"].get("destination_passing_style", True):
        outputs = new_outputs(definition, workload)
        entry(*arguments, *outputs)
        return outputs
    result = entry(*arguments)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def kernelarena_tolerance(definition: dict, output: str) -> tuple[float, float, bool]:
    """(atol, rtol, whether atol scales by the reference output's RMS above 1: the defaults do)."""
    declared = definition.get("tolerances") or {}
    tolerance = declared.get(output) or declared.get("*")
    if tolerance:
        return tolerance["atol"], tolerance["rtol"], bool(tolerance.get("atol_scaled"))
    return (*KERNELARENA_DEFAULTS[definition["outputs"][output]["dtype"]], True)


def compare(
    out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float, scaled: bool
) -> tuple[bool, str]:
    """Whether every element is within kernelarena's rule, and a line with both tools' counts.
    (kernelarena also passes an output within its rule of the reference computed in float64;
    this script has no float64 run of the reference, so it can only say less.)"""
    out64, ref64 = out.double(), ref.double()
    if scaled:
        finite = ref64[torch.isfinite(ref64)]
        rms = float(finite.square().mean().sqrt()) if finite.numel() else 1.0
        atol *= max(rms, 1.0)
    difference = (out64 - ref64).abs()
    relative = difference / (ref64.abs() + 1e-8)
    ours_out = ~(difference <= atol + rtol * ref64.abs())  # a NaN is out, too
    peer_out = ((difference > PEER_ATOL) & (relative > PEER_RTOL)) | difference.isnan()
    worst = int(torch.nan_to_num(difference, nan=float("inf")).argmax())
    line = (
        f"max abs {difference.max().item():.4g}, max rel {relative.max().item():.4g}; "
        f"kernelarena rule (atol {atol:g}, rtol {rtol:g}): {int(ours_out.sum())} of "
        f"{out.numel()} out; flashinfer-bench rule (1e-2, 1e-2): {int(peer_out.sum())} out; "
        f"worst at flat index {worst}: got {out.flatten()[worst].item():.6g}, "
        f"expected {ref.flatten()[worst].item():.6g}"
    )
    return not bool(ours_out.any()), line


def synchronize() -> None:
    if DEVICE == "cuda":
        torch.cuda.synchronize()


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))


def reference_outputs(definition: dict, inputs: dict) -> list[torch.Tensor]:
    namespace: dict[str, Any] = {}
    exec(compile(definition["reference"], "<reference>", "exec"), namespace)
    result = namespace["run"](**inputs)
    return list(result) if isinstance(result, (tuple, list)) else [result]


def check(entry: Any, solution: dict, definition: dict, workload: dict, seed: int) -> bool:
    """One trial: the solution twice and the reference once on the same inputs. True when every
    output is within kernelarena's rule, the inputs are unchanged and the two calls agree."""
    inputs = make_inputs(definition, workload, seed)
    pristine = {name: tensor.clone() for name, tensor in inputs.items()}
    try:
        first = call(entry, solution, definition, workload, inputs)
        second = call(entry, solution, definition, workload, inputs)
        synchronize()
    except Exception as error:  # the finding itself: both tools record a RUNTIME_ERROR
        said = " ".join(str(error).splitlines()[:3])  # pybind11 goes on to print every tensor
        print(f"    seed {seed}: the call raised {type(error).__name__}: {said}")
        return False
    changed = [name for name in inputs if not same_bits(inputs[name], pristine[name])]
    if changed:
        print(f"    seed {seed}: inputs changed by the call: {changed}")
    expected = reference_outputs(definition, pristine)
    fine = not changed
    for name, out, again, ref in zip(definition["outputs"], first, second, expected, strict=True):
        within, line = compare(out, ref, *kernelarena_tolerance(definition, name))
        print(f"    seed {seed} {name}: {line}")
        fine &= within
        if not same_bits(out, again):
            print(f"    seed {seed} {name}: a second call on the same inputs gave other values")
            fine = False
    return fine


def capture(entry: Any, solution: dict, definition: dict, workload: dict) -> bool:
    """One call captured in a CUDA graph (on a side stream, as graph timing does), replayed."""
    inputs = make_inputs(definition, workload, seed=0)
    call(entry, solution, definition, workload, inputs)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            outputs = call(entry, solution, definition, workload, inputs)
        graph.replay()
        torch.cuda.synchronize()
    except Exception as error:
        print(f"    capture: {type(error).__name__}: {str(error).splitlines()[0]}")
        return False
    expected = reference_outputs(definition, inputs)
    for name, out, ref in zip(definition["outputs"], outputs, expected, strict=True):
        _, line = compare(out, ref, *kernelarena_tolerance(definition, name))
        print(f"    capture {name}: {line}")
    return True


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("solution", help="a solution JSON file, or a solution name with --dataset")
    parser.add_argument("--dataset", type=Path, help="a FlashInfer-Trace folder to find files in")
    parser.add_argument("--definition", type=Path, help="the definition JSON (without --dataset)")
    parser.add_argument("--workloads", type=Path, help="the workloads JSONL (without --dataset)")
    parser.add_argument("--workload", action="append", help="uuid to run (default: every one)")
    parser.add_argument("--trials", type=int, default=3, help="fresh random inputs per workload")
    parser.add_argument("--capture", action="store_true", help="also capture a call in a graph")
    parser.add_argument("--build-dir", type=Path, help="where to build (default: a temp folder)")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    arguments = parser.parse_args()
    solution, definition, workloads = find_files(arguments)
    folder = arguments.build_dir or Path(tempfile.mkdtemp(prefix="reproduce-"))
    folder.mkdir(parents=True, exist_ok=True)
    global DEVICE
    DEVICE = arguments.device
    entry = build(solution, folder)
    failing = 0
    with torch.no_grad():
        for workload in workloads:
            print(f"  workload {workload['uuid']} {workload['axes']}")
            trials = range(arguments.trials)
            failing += not all([check(entry, solution, definition, workload, s) for s in trials])
        # Last: a capture that fails can leave the process unfit for more checks.
        for workload in workloads if arguments.capture else []:
            print(f"  workload {workload['uuid']} {workload['axes']}, one call in a CUDA graph")
            if not capture(entry, solution, definition, workload):
                break
    print(
        f"{solution['name']}: {failing} of {len(workloads)} workload(s) off under kernelarena's rule"
    )


if __name__ == "__main__":
    main()
