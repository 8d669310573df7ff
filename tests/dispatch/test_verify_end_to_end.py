"""A solution right only inside the judge: ``kernelarena run`` (the real command, on a CPU) passes
it, and in a fresh process with default settings apply drops it on its first use and returns the
fallback's result: the user never sees a wrong value."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import kernelarena
from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    TensorSpec,
    TraceSet,
    Workload,
)

FIXTURE = Path(__file__).parent / "fixtures" / "right_only_when_judged.py"
SOURCE_ROOT = str(Path(kernelarena.__file__).resolve().parents[1])

DEFINITION = Definition(
    name="judged_scale",
    op_type="judged",
    axes={"n": AxisVar(type="var")},
    inputs={
        "x": TensorSpec(shape=["n"], dtype="float32"),
        "factor": TensorSpec(shape=None, dtype="float32"),
    },
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="def run(x, factor):\n    return x * factor\n",
)

USER_PROGRAM = """
import json, sys, warnings
import torch
import kernelarena

kernelarena.enable_apply(sys.argv[1])  # default settings: verify is on

@kernelarena.apply("judged_scale")
def scale(x, factor):
    return x * factor

report = {"errors": [], "warnings": []}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for n in (1000, 1000, 1000):  # the measured shape; its second call takes the fast path
        x = torch.randn(n)
        report["errors"].append((scale(x, 1.5) - x * 1.5).abs().max().item())
report["warnings"] = [str(w.message) for w in caught]
kernelarena.enable_apply(sys.argv[1], verify=False)  # the control: what it does unchecked
x = torch.randn(1000)
report["unchecked_error"] = (scale(x, 1.5) - x * 1.5).abs().max().item()
print(json.dumps(report))
"""


def make_dataset(root: Path) -> None:
    dataset = TraceSet(root=root)
    dataset.add_definition(DEFINITION)
    dataset.add_solution(
        Solution(
            name="judged_scale_sly",
            definition=DEFINITION.name,
            author="tests",
            spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="sly.py::run"),
            sources=[SourceFile(path="sly.py", content=FIXTURE.read_text())],
        )
    )
    dataset.add_workload(
        DEFINITION.name,
        Workload(
            uuid="n1000",
            axes={"n": 1000},
            inputs={"x": RandomInput(), "factor": ScalarInput(value=1.5)},
        ),
    )


def environment() -> dict[str, str]:
    """This process's, with this checkout's sources first and verify at its default."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KERNELARENA_VERIFY")}
    env["PYTHONPATH"] = os.pathsep.join([SOURCE_ROOT, env.get("PYTHONPATH", "")])
    return env


def test_a_solution_right_only_when_judged_passes_the_judge_and_never_reaches_the_user(
    tmp_path: Path,
) -> None:
    dataset = tmp_path / "dataset"
    make_dataset(dataset)
    judged = subprocess.run(
        [
            sys.executable,
            "-m",
            "kernelarena.cli",
            "run",
            "judged_scale",
            "--dataset",
            str(dataset),
            "--device",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(),
        check=False,
    )
    assert judged.returncode == 0, judged.stdout[-3000:] + judged.stderr[-3000:]
    traces = json.loads(judged.stdout.strip().splitlines()[-1])["traces"]
    assert [(t["solution"], t["evaluation"]["status"]) for t in traces] == [
        ("judged_scale_sly", "PASSED")
    ]
    used = subprocess.run(
        [sys.executable, "-c", USER_PROGRAM, str(dataset)],
        capture_output=True,
        text=True,
        timeout=300,
        env=environment(),
        check=False,
    )
    assert used.returncode == 0, used.stderr[-3000:]
    report = json.loads(used.stdout.strip().splitlines()[-1])
    assert max(report["errors"]) <= 1e-6, report  # the fallback's x * factor, every call
    assert abs(report["unchecked_error"] - 1.0) <= 1e-5, report  # it is wrong outside the judge
    dropped = [w for w in report["warnings"] if "judged_scale_sly is dropped" in w]
    assert len(dropped) == 1 and "disagrees with the reference" in dropped[0], report
