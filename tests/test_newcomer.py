"""A newcomer's first hour (issue 41), each step as a user meets it: ``kernelarena`` in a new
process, on a fresh folder. One dataset is run once for the module (a CPU run costs seconds of
worker start-up); the tests read what that run printed and wrote.

The dataset: ``double_it`` with a good workload, one that lacks its axis and one of 10^12 rows
(written by hand, as add_workload refuses the first), a solution file that targets only an H100,
and a solution registered from Python in a module the run imports.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kernelarena.data import (
    AxisVar,
    BuildSpec,
    Definition,
    RandomInput,
    Solution,
    SourceFile,
    TensorSpec,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.options import make_trace
from tests.cli_process import environment, kernelarena
from tests.report.synthetic import H100
from tests.report.synthetic import environment as gpu_environment

DEFINITION = Definition(
    name="double_it",
    op_type="toy",
    axes={"n": AxisVar()},
    inputs={"x": TensorSpec(shape=["n"], dtype="float32")},
    outputs={"out": TensorSpec(shape=["n"], dtype="float32")},
    reference="def run(x):\n    return x * 2\n",
    bytes_moved="nbytes('x') + nbytes('out')",
)
H100_ONLY = Solution(
    name="double_it_h100",
    definition="double_it",
    author="someone",
    spec=BuildSpec(language="python", target_hardware=["NVIDIA_H100"], entry_point="k.py::run"),
    sources=[SourceFile(path="k.py", content="def run(x, out):\n    out.copy_(x * 2)\n")],
)
USER_MODULE = """import kernelarena


def double(x, out):
    out.copy_(x + x)


kernelarena.register("double_it", double, name="double_it_mine", language="python")
"""


def make_dataset(root: Path) -> Path:
    made = TraceSet(root=root)
    made.add_definition(DEFINITION)
    made.add_solution(H100_ONLY)
    made.add_workload(
        "double_it", Workload(uuid="n100", axes={"n": 100}, inputs={"x": RandomInput()})
    )
    lines = root / "workloads" / "toy" / "double_it.jsonl"
    good = lines.read_text().splitlines()[0]
    no_axis = good.replace('"axes":{"n":100}', '"axes":{}').replace('"n100"', '"noaxis"')
    huge = good.replace('"n":100', '"n":1000000000000').replace('"n100"', '"huge"')
    lines.write_text("\n".join([good, no_axis, huge]) + "\n")
    (root.parent / "newcomer_kernels.py").write_text(USER_MODULE)
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("newcomer")


@pytest.fixture(scope="module")
def dataset(folder: Path) -> Path:
    return make_dataset(folder / "mine")


@pytest.fixture(scope="module")
def cpu_run(folder: Path, dataset: Path) -> subprocess.CompletedProcess[str]:
    """``kernelarena run`` on the dataset, on an 80-column terminal."""
    return kernelarena(
        "run", "--dataset", str(dataset), "--import", "newcomer_kernels", "--device", "cpu",
        "--trials", "1", cwd=folder, COLUMNS="80",
    )  # fmt: skip


def _traces(dataset: Path) -> list[dict[str, object]]:
    path = dataset / "traces" / "toy" / "double_it.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# -- 2: setting up twice is harmless; a conflict names the name and the file ------------------------


def test_setting_up_again_is_a_no_op_and_a_conflict_is_named(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    good = Workload(uuid="w1", axes={"n": 8}, inputs={"x": RandomInput()})
    for _ in range(2):  # a set-up script run twice, each time on a fresh TraceSet
        again = TraceSet(root=root)
        again.add_definition(DEFINITION)
        again.add_workload("double_it", good)
        again.add_workload("double_it", good)  # and twice within one run
    assert TraceSet.load(root, strict=True).workloads["double_it"] == [good]
    changed = DEFINITION.model_copy(update={"reference": "def run(x):\n    return x + x\n"})
    with pytest.raises(FileExistsError, match=r"definition 'double_it': .*double_it\.json"):
        TraceSet(root=root).add_definition(changed)
    other = Workload(uuid="w1", axes={"n": 9}, inputs={"x": RandomInput()})
    with pytest.raises(ValueError, match=r"uuid 'w1' of double_it .*double_it\.jsonl:1"):
        TraceSet.load(root).add_workload("double_it", other)


# -- 7: a workload that cannot run is the user's error, found before any solution runs --------------


def test_add_workload_rejects_a_missing_axis_at_once(tmp_path: Path) -> None:
    made = TraceSet(root=tmp_path / "ds")
    made.add_definition(DEFINITION)
    with pytest.raises(ValueError, match=r"workload 'w0' of double_it: .*missing values.*\['n'\]"):
        made.add_workload("double_it", Workload(uuid="w0", axes={}, inputs={"x": RandomInput()}))
    assert not (tmp_path / "ds" / "workloads").exists()


def test_wrong_workloads_are_rejected_before_any_job_and_get_no_trace(
    cpu_run: subprocess.CompletedProcess[str], dataset: Path
) -> None:
    out = cpu_run.stdout
    missing = re.search(
        r"workload 'noaxis' of double_it \(.*double_it.jsonl:2\) is wrong: .*'n'", out
    )
    huge = re.search(r"workload 'huge' of double_it .* is wrong: .* GB, more than the .* GB", out)
    assert missing and huge, out + cpu_run.stderr
    assert out.index("is wrong") < out.index("PASSED")  # said before the results
    assert "2 workloads rejected" in out and cpu_run.returncode == 1
    assert {t["workload"]["uuid"] for t in _traces(dataset)} == {"n100"}  # type: ignore[index]


# -- 8: a solution for other hardware is skipped with the reason -----------------------------------


def test_a_solution_for_other_hardware_says_why_it_is_skipped(
    cpu_run: subprocess.CompletedProcess[str], folder: Path, dataset: Path
) -> None:
    assert "skipped double_it_h100 (double_it): targets NVIDIA_H100; no GPU here" in cpu_run.stdout
    chosen = kernelarena("run", "--dataset", str(dataset), "-s", "h100", "--device", "cpu")
    assert chosen.returncode == 2
    assert "double_it_h100 targets NVIDIA_H100; no GPU here" in chosen.stderr, chosen.stderr
    shown = kernelarena("show", "double_it", "--dataset", str(dataset))
    assert "double_it_h100  [python] k.py::run  targets: NVIDIA_H100  (skipped here: targets" in (
        shown.stdout
    ), shown.stdout


# -- 4 and 9: a CPU run checks, it does not rank; its table reads on 80 columns --------------------


def test_a_cpu_run_shows_checks_not_speedups(cpu_run: subprocess.CompletedProcess[str]) -> None:
    out = cpu_run.stdout
    assert re.search(r"n=100 +mine +PASSED", out), out + cpu_run.stderr
    results = out[out.index("CPU times are checks, not rankings") :].split("\n", 1)[1]
    assert "speedup" not in results and "ceiling" not in results, out
    assert "TFLOP/s" not in out and "GB/s" not in out  # no CPU ceilings either


def test_the_run_table_reads_on_80_columns(cpu_run: subprocess.CompletedProcess[str]) -> None:
    lines = cpu_run.stdout.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("double_it")) :]
    assert all(len(line) <= 80 for line in table), "\n".join(table)
    header = next(line for line in table if line.startswith("workload"))
    assert header.split() == ["workload", "solution", "status", "abs", "err", "rel", "err",
                              "median", "p20-p80"]  # fmt: skip
    row = next(line for line in table if "PASSED" in line)
    assert "…" not in row and re.search(r"PASSED +0 +0 +[\d.]+ +[\d.]+-[\d.]+$", row), row


# -- 3: no solution registered is named as the cause -------------------------------------------------


def test_a_definition_without_a_solution_is_named_as_the_cause(tmp_path: Path) -> None:
    made = TraceSet(root=tmp_path / "ds")
    made.add_definition(DEFINITION)
    made.add_workload("double_it", Workload(uuid="n8", axes={"n": 8}, inputs={"x": RandomInput()}))
    for suite in ([], ["--suite", "all"]):
        done = kernelarena("run", "--dataset", str(tmp_path / "ds"), "--device", "cpu", *suite)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "no job: double_it has no solution: import the module that calls" in done.stdout
        assert (
            "kernelarena run --import MODULE" in done.stdout
            and "try --suite all" not in done.stdout
        )


# -- 5 and 6: a folder that is not there, a JSON typo ------------------------------------------------


def test_an_unknown_dataset_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    missing = str(tmp_path / "no" / "such")
    for command in (["run", "double_it"], ["list"], ["show", "double_it"]):
        done = kernelarena(*command, "--dataset", missing)
        assert done.returncode == 2, (command, done.stdout)
        assert f"--dataset {missing}: no such folder" in done.stderr, (command, done.stderr)


def test_a_json_typo_is_named_with_the_exact_command(tmp_path: Path) -> None:
    root = tmp_path / "typo"
    TraceSet(root=root).add_definition(DEFINITION)
    path = root / "definitions" / "toy" / "double_it.json"
    path.write_text(path.read_text().replace('"op_type": "toy",', '"op_type": "toy"'))
    problem = "typo/definitions/toy/double_it.json: Invalid JSON"
    for command in (["list"], ["show", "double_it"], ["run", "double_it", "--device", "cpu"]):
        done = kernelarena(*command, "--dataset", str(root))
        assert problem in done.stderr and f"'kernelarena validate {root}'" in done.stderr, (
            command, done.stderr,
        )  # fmt: skip
    assert f"'double_it' did not load: {problem}" in done.stderr and done.returncode == 2


# -- 9 and 10: help like other tools, the package's public names -------------------------------------


def test_help_is_plain_with_h_and_version() -> None:
    version = kernelarena("--version")
    assert re.fullmatch(r"kernelarena \d+\.\d+\.\d+\n", version.stdout), version.stdout
    pages = {
        command: kernelarena(command, "-h", COLUMNS="80") for command in ("run", "show", "export")
    }
    for page in pages.values():
        assert page.returncode == 0 and page.stdout.startswith("Usage: "), page.stdout + page.stderr
        assert not re.search(r"<\w+(\[\w+\])?>|\{\w+\}", page.stdout), page.stdout
        assert all(len(line) <= 80 for line in page.stdout.splitlines())
    assert "[OPTIONS] [NAMES]..." in pages["run"].stdout
    assert re.search(r"^  --resume +skip jobs", pages["run"].stdout, re.MULTILINE)
    assert (
        "--no-resume" not in pages["run"].stdout and "-s, --solutions NAME" in pages["run"].stdout
    )
    assert re.search(r"^  NAME +a definition, family or op_type", pages["show"].stdout, re.M)
    assert re.search(r"^  PATH +a new folder", pages["export"].stdout, re.MULTILINE)


def test_the_package_shows_its_public_names() -> None:
    code = (
        "import pydoc, kernelarena\n"
        "print(sorted(set(dir(kernelarena)) & {'Benchmark', 'register', 'TraceSet', 'apply'}))\n"
        "print(pydoc.render_doc(kernelarena, renderer=pydoc.plaintext))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=environment(), capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    first, page = done.stdout.split("\n", 1)
    assert first == "['Benchmark', 'TraceSet', 'apply', 'register']", done.stdout + done.stderr
    assert "register(definition, fn, name" in page and "class Benchmark" in page


# -- 11: a dataset's definitions apart from the built-in ones ----------------------------------------


def test_list_tells_the_datasets_definitions_from_the_built_in_ones(dataset: Path) -> None:
    own = kernelarena("list", "--dataset", str(dataset), COLUMNS="80")
    assert own.returncode == 0, own.stderr
    assert f"definitions in {dataset} (1):" in own.stdout and "double_it" in own.stdout
    assert re.search(r"and \d+ built-in definitions \('--library' lists them too\)", own.stdout)
    assert "rmsnorm_bf16" not in own.stdout
    both = kernelarena("list", "--dataset", str(dataset), "--library", COLUMNS="80").stdout
    assert (
        both.index("double_it") < both.index("built-in definitions (") < both.index("rmsnorm_bf16")
    )


# -- 12 and 4: the report names a registered solution, leads with GPUs, shows CPU runs as checks -----


def _gpu_trace(dataset: Path) -> None:
    """A timed H100 trace beside the CPU run's, appended as a GPU run would."""
    from kernelarena.data import Performance, Status

    workload = Workload(uuid="n100", axes={"n": 100}, inputs={"x": RandomInput()})
    performance = Performance(latency_ms=0.004, reference_latency_ms=0.008, speedup_factor=2.0)
    trace = make_trace(
        DEFINITION, H100_ONLY, workload, gpu_environment(H100), Status.PASSED, "",
        performance=performance,
    )  # fmt: skip
    with (dataset / "traces" / "toy" / "double_it.jsonl").open("a") as lines:
        lines.write(trace.to_json() + "\n")


def _hardware_blocks(html: str) -> dict[str, str]:
    """The definition page's sections, one per hardware model, in page order."""
    page = html[html.index('id="d-double_it"') :]
    parts = page.split('<div class="hardware" data-hardware="')[1:]
    return {part.split('"', 1)[0]: part for part in parts}


def test_the_report_names_registered_solutions_and_leads_with_gpus(
    cpu_run: subprocess.CompletedProcess[str], folder: Path, dataset: Path
) -> None:
    assert cpu_run.stdout  # the CPU traces are there
    _gpu_trace(dataset)
    output = folder / "report.html"
    made = kernelarena(
        "report", "--dataset", str(dataset), "--import", "newcomer_kernels", "-o", str(output),
        cwd=folder,
    )  # fmt: skip
    assert made.returncode == 0, made.stdout + made.stderr
    html = output.read_text()
    assert "<td>mine</td><td>python</td><td>user</td><td>peer</td>" in html
    blocks = _hardware_blocks(html)
    (gpu, gpu_block), (cpu, cpu_block) = blocks.items()  # the GPU first
    assert gpu == H100 and cpu.startswith("CPU"), list(blocks)
    assert "speedup over the reference" in gpu_block and "2.00x" in gpu_block
    assert f"{cpu}: checks</h2>" in cpu_block and "speedup over" not in cpu_block
    summary = html[: html.index('id="d-double_it"')]
    assert summary.index(f'data-hardware="{H100}"') < summary.index(f'data-hardware="{cpu}"')
    provenance = re.search(r'<tr data-hardware="CPU[^"]*">(.*?)</tr>', html)
    assert provenance and re.findall(r'data-value="(\d+)"', provenance.group(1))[:3] == [
        "1", "0", "0"]  # 1 trace, 0 outdated, 0 of unknown solutions  # fmt: skip
    bare = kernelarena("report", "--dataset", str(dataset), "-o", str(output), cwd=folder)
    assert bare.returncode == 0, bare.stdout + bare.stderr
    html = output.read_text()  # without --import: said so, and not counted as outdated
    assert "Not in the dataset: mine. Solutions registered from Python" in html
    provenance = re.search(r'<tr data-hardware="CPU[^"]*">(.*?)</tr>', html)
    assert provenance and re.findall(r'data-value="(\d+)"', provenance.group(1))[:3] == [
        "1", "0", "1"]  # 1 trace, 0 outdated, 1 of a solution not in the dataset  # fmt: skip
    figures = json.loads(re.search(r'<script type="application/json" id="figures">(.*?)</script>',
                                   html).group(1))  # type: ignore[union-attr]  # fmt: skip
    cpu_figures = [f for f in figures.values() if "CPU check" in f["layout"]["title"]["text"]]
    assert cpu_figures and all("range" in f["layout"]["yaxis"] for f in cpu_figures)


# -- 1: the Python API says when a definition has no solution ----------------------------------------


def test_planning_a_definition_without_solutions_warns(tmp_path: Path) -> None:
    """``Benchmark(dataset).run_all()`` before ``import my_kernels``: a warning, not silence."""
    from kernelarena.evaluate.executors.runner import plan

    made = TraceSet(root=tmp_path / "ds")
    made.add_definition(DEFINITION)
    made.add_workload("double_it", Workload(uuid="n8", axes={"n": 8}, inputs={"x": RandomInput()}))
    with pytest.warns(UserWarning, match="'double_it' has no solution: import the module that"):
        assert plan(made, suite="all") == []


def test_the_performance_suite_on_a_cpu_says_its_workloads_need_a_gpu() -> None:
    """The library's performance workloads run only on a GPU: asked for on a CPU, the run says
    so, not that no workload is tagged performance."""
    done = kernelarena("run", "silu_and_mul_fp32", "--device", "cpu", "--suite", "performance")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "its performance workloads run only on a GPU" in done.stdout, done.stdout
    assert "try --suite all" in done.stdout
