"""After the timed calls the judge checks that the inputs no output aliases still hold what it drew
(``timing_check.inputs_kept``): an in-place operator, whose aliased input changes on every call,
must still pass, and a solution that changes its other input only once it is being timed must not."""

from __future__ import annotations

from pathlib import Path

from kernelarena.data import BuildSpec, Solution, SourceFile, Status, TraceSet
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from tests.dispatch.toys import inplace_definition, workload

# Right on the trials' calls; from the fifth call on it also halves ``x``, which no output aliases.
REWRITES_X = """_calls = [0]


def run(x, acc, out):
    acc.add_(x)
    out.copy_(acc * 2)
    _calls[0] += 1
    if _calls[0] > 4:
        x.mul_(0.5)
"""
HONEST = "def run(x, acc, out):\n    acc.add_(x)\n    out.copy_(acc * 2)\n"


def _solution(name: str, source: str) -> Solution:
    return Solution(
        name=f"toy_inplace_fp32_{name}",
        definition="toy_inplace_fp32",
        author="tests",
        spec=BuildSpec(language="python", target_hardware=["cpu"], entry_point="s.py::run"),
        sources=[SourceFile(path="s.py", content=source)],
    )


def test_in_place_passes_and_rewriting_another_input_while_timed_fails(tmp_path: Path) -> None:
    definition = inplace_definition()
    made = TraceSet(root=tmp_path)
    made.add_definition(definition)
    made.add_solution(_solution("honest", HONEST))
    made.add_solution(_solution("rewrites_x", REWRITES_X))
    made.add_workload(definition.name, workload(definition, n=333))
    traces = {
        t.solution: t.evaluation
        for t in Benchmark(
            made,
            devices="cpu",
            options=Options(trials=2, budget_ms=20, max_iterations=20),
            timeouts=Timeouts(build_s=120, run_s=60, startup_s=300),
        ).run_all()
    }
    honest, cheat = traces["toy_inplace_fp32_honest"], traces["toy_inplace_fp32_rewrites_x"]
    assert honest is not None and honest.status is Status.PASSED, honest and honest.log
    assert honest.performance is not None and honest.performance.latency_ms > 0
    assert cheat is not None and cheat.status is Status.INCORRECT_NUMERICAL, cheat and cheat.log
    assert "during the timed calls: input 'x' was modified" in cheat.log
