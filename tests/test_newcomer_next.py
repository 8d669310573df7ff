"""The next things a newcomer trips on, past issue 41's list: a dataset written by hand from
docs/data-model.md, two solutions (a file and one registered from Python), run, apply's table; a
solution registered from the script that runs the benchmark; typos in --solutions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from rich.console import Console

from kernelarena.data import BuildSpec, Status, TraceSet, Workload
from tests.cli_process import kernelarena, python
from tests.report.synthetic import environment
from tests.test_newcomer import DEFINITION, H100_ONLY

DATA_MODEL = Path(__file__).parents[1] / "docs" / "data-model.md"
HAND_KERNELS = """import torch, kernelarena


def vadd_mine(a, b, c):
    torch.add(a, b, out=c)


kernelarena.register("vadd", vadd_mine, name="vadd_mine")
"""


def hand_written_files() -> dict[str, str]:
    """``{path: content}`` of the files "A dataset by hand" shows, each under its path."""
    section = DATA_MODEL.read_text(encoding="utf-8").split("\n## A dataset by hand\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    return dict(re.findall(r"^`([\w/.]+)`\n\n```json\n(.*?)```", section, flags=re.M | re.S))


def test_the_data_models_dataset_by_hand_runs_with_a_registered_solution(tmp_path: Path) -> None:
    files = hand_written_files()
    assert sorted(files) == [
        "definitions/vec/vadd.json", "solutions/vec/vadd/vadd_torch.json",
        "workloads/vec/vadd.jsonl",
    ]  # fmt: skip
    root = tmp_path / "my-hand"
    for path, content in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(content)
    (tmp_path / "hand_kernels.py").write_text(HAND_KERNELS)
    assert kernelarena("validate", str(root)).returncode == 0
    ran = kernelarena(
        "run", "--dataset", str(root), "--import", "hand_kernels", "--device", "cpu",
        "--trials", "1", cwd=tmp_path,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert re.search(r"mine +PASSED", ran.stdout) and re.search(r"torch +PASSED", ran.stdout)
    table = kernelarena(
        "dispatch", "show", "vadd", "--dataset", str(root), "--import", "hand_kernels",
        cwd=tmp_path, COLUMNS="200",
    )  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert re.search(r"n=1000 .*(mine|torch).*(torch|mine)", table.stdout), table.stdout


def test_registering_from_the_script_that_runs_the_benchmark_is_refused(tmp_path: Path) -> None:
    """The worker imports the function's file: without a main guard that ran the whole script,
    benchmark and all, inside the sandbox, which started workers of its own, without end."""
    (tmp_path / "bench.py").write_text(
        "import kernelarena\n\n\ndef double(x, out):\n    out.copy_(x * 2)\n\n\n"
        'kernelarena.register("double_it", double, name="double_it_script")\n'
        "kernelarena.Benchmark(kernelarena.TraceSet(root=None)).run_all()\n"
    )
    done = python("bench.py", tmp_path, timeout=120)
    assert done.returncode == 1 and "is defined in the script being run" in done.stderr
    assert "if __name__ ==" in done.stderr


def test_adding_a_solution_again_is_a_no_op_and_a_conflict_is_named(tmp_path: Path) -> None:
    for _ in range(2):
        again = TraceSet(root=tmp_path / "ds")
        again.add_definition(DEFINITION)
        again.add_solution(H100_ONLY)
        again.add_solution(H100_ONLY)
    changed = H100_ONLY.model_copy(update={"author": "someone else"})
    with pytest.raises(ValueError, match=r"solution 'double_it_h100' is already in .*_h100\.json"):
        TraceSet.load(tmp_path / "ds").add_solution(changed)
    assert TraceSet.load(tmp_path / "ds", strict=True).solutions == {H100_ONLY.name: H100_ONLY}


def test_a_solutions_typo_lists_the_solutions_there_are() -> None:
    from kernelarena.evaluate.executors.runner import PlanError, make_plan

    made = TraceSet(root=None)
    made.add_definition(DEFINITION, persist=False)
    cpu = H100_ONLY.model_copy(
        update={
            "name": "double_it_torch",
            "spec": BuildSpec(language="python", target_hardware=["cpu"], entry_point="k.py::run"),
        }
    )
    for solution in (H100_ONLY, cpu):
        made.add_solution(solution, persist=False)
    with pytest.raises(PlanError, match=r"their solutions: double_it_h100, double_it_torch \(one"):
        make_plan(made, None, ["tourch"], "all", False)


def test_a_failures_line_is_its_verdict_with_its_brackets() -> None:
    """Not the sandbox's last words (what the solution printed follows the verdict), and no rich
    markup eating ``[python]``."""
    from kernelarena.evaluate.options import make_trace
    from kernelarena.report.console import failure_details

    workload = Workload(uuid="n8", axes={"n": 8}, inputs={})
    trace = make_trace(
        DEFINITION, H100_ONLY, workload, environment("CPU x86_64"),
        Status.RUNTIME_ERROR, "IndexError: index [3] is out of bounds for [python] list"
        "\n--- output ---\nkernelarena sandbox on cpu: Landlock ABI 7",
    )  # fmt: skip
    console = Console(record=True, width=200)
    failure_details([trace], console)
    shown = console.export_text()
    assert "index [3] is out of bounds for [python] list" in shown and "Landlock" not in shown


def test_a_suite_a_cpu_cannot_run_says_so() -> None:
    """``kernelarena run NAME --suite performance`` on a laptop: the workloads need a GPU; the old
    advice, "try --suite all", would not have helped."""
    from kernelarena.cli.run_notes import why_nothing_runs
    from kernelarena.data import RandomInput
    from kernelarena.evaluate.executors.runner import make_plan

    made = TraceSet(root=None)
    made.add_definition(DEFINITION, persist=False)
    made.add_solution(H100_ONLY.model_copy(update={"name": "double_it_cpu", "spec": BuildSpec(
        language="python", target_hardware=["cpu"], entry_point="k.py::run")}), persist=False)  # fmt: skip
    big = Workload(uuid="big", axes={"n": 2**20}, inputs={"x": RandomInput()}, tags=["performance"])
    made.add_workload("double_it", big, persist=False)
    planned = make_plan(made, None, None, "performance", False)
    assert planned.jobs == []
    (line,) = why_nothing_runs(made, [DEFINITION], planned, "performance", False)
    assert line == (
        "double_it: each of its 1 workload is tagged large or performance, which run only on a GPU"
    )
