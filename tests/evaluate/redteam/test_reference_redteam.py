"""Attacks from a dataset: a definition whose reference (or its make_inputs) reaches out of the
judge. References run in a sandbox of their own, confined as a solution's; each attack must be
refused or contained, reported as the dataset's problem naming the definition (the job skipped,
no trace blaming the solution), leave nothing changed outside and nothing running after the
run, while another definition's solutions in the same run pass. (``docs/evaluation.md``,
"Threat model".)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from kernelarena.compile.cache import sandbox_caches_root
from kernelarena.data import (
    BuildSpec,
    Definition,
    RandomInput,
    ScalarInput,
    Solution,
    SourceFile,
    Status,
    TraceSet,
    Workload,
)
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.confine import landlock_abi
from kernelarena.evaluate.sandbox.isolation import walls
from tests.evaluate.bad_solutions import DEFINITION
from tests.evaluate.redteam import servers
from tests.evaluate.redteam.test_redteam import _environment, _processes_named

REFERENCES = Path(__file__).parents[2] / "fixtures" / "redteam_references"
SECRET = f"secret-{uuid.uuid4().hex}"
HONEST = "def run(x, factor, out):\n    out.copy_(x * factor)\n"
PLANTED = sandbox_caches_root() / "library" / "planted-by-a-reference.py"

# reference file -> a phrase the dataset's error must hold besides the definition's name
ATTACKS: dict[str, str] = {
    "writes_outside": "raised: ",  # OSError: read-only, or FileNotFoundError: not in its view
    "reads_secrets": "the environment holds no REDTEAM_SECRET_TOKEN",
    "connects_loopback": "ConnectionRefusedError",
    "asks_command_server": "FileNotFoundError",  # the socket is not in its view
    "orphans_a_process": "left processes running",
    "raises": "raised: ValueError: this reference always raises",
    "hangs": "did not answer within 5 s: its sandbox was killed",
    "make_inputs_writes": "raised in make_inputs: ",
    "returns_garbage": "is broken: it returned 1 values (str) for outputs ['out']",
    "crashes_on_seven": "died from signal SIGSEGV",
}
# Workloads of each definition (n); on the second, crashes_on_seven's reference runs.
SIZES = {"crashes_on_seven": (64, 7)}
if landlock_abi() > 0:
    ATTACKS["plants_a_build"] = "raised: PermissionError"


def _definition(stem: str) -> Definition:
    reference = (REFERENCES / f"{stem}.py").read_text()
    return DEFINITION.model_copy(update={"name": f"reference_{stem}", "reference": reference})


def _dataset(root: Path, stems: list[str]) -> TraceSet:
    """The honest vector_scale beside a definition per attacking reference, each with an honest
    solution and one workload."""
    made = TraceSet(root=root)
    for definition in [DEFINITION, *(_definition(stem) for stem in stems)]:
        made.add_definition(definition)
        made.add_solution(
            Solution(
                name=f"{definition.name}_honest",
                definition=definition.name,
                author="tests",
                spec=BuildSpec(
                    language="python", target_hardware=["cpu", "cuda"], entry_point="s.py::run"
                ),
                sources=[SourceFile(path="s.py", content=HONEST)],
            )
        )
        for size in SIZES.get(definition.name.removeprefix("reference_"), (64,)):
            made.add_workload(
                definition.name,
                Workload(
                    uuid=f"{definition.name}-n{size}",
                    axes={"n": size},
                    inputs={"x": RandomInput(), "factor": ScalarInput(value=1.5)},
                ),
            )
    return made


def _run(root: Path, stems: list[str], device: str = "cpu") -> Benchmark:
    benchmark = Benchmark(
        _dataset(root, stems),
        devices=device,
        options=Options(trials=2, budget_ms=20, max_iterations=20, reference_timeout_s=5.0),
        timeouts=Timeouts(build_s=120, run_s=60, startup_s=300),
    )
    benchmark.run_all()
    return benchmark


@pytest.mark.timeout(900)
def test_attacks_from_a_dataset_s_reference_are_contained(tmp_path: Path) -> None:
    _contained(tmp_path, "cpu")


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_attacks_from_a_dataset_s_reference_are_contained_on_gpu(tmp_path: Path) -> None:
    _contained(tmp_path, "cuda:0")


def _contained(tmp_path: Path, device: str) -> None:
    if not walls().available:
        pytest.skip(f"no namespaces on this machine: {walls().why_not}")
    (tmp_path / "host").mkdir()
    target = tmp_path / "host" / "pwned.txt"
    home_file = Path.home() / f".kernelarena-redteam-{uuid.uuid4().hex}"
    home_file.write_text(SECRET)
    orphan = f"ka-reforph-{uuid.uuid4().hex[:4]}"
    unix, socket_path = servers.command_server(tmp_path / "host")
    tcp, port = servers.loopback_server()
    try:
        with (
            servers.serving(unix) as reached_unix,
            servers.serving(tcp) as reached_tcp,
            _environment(
                {
                    "KERNELARENA_REDTEAM_SOCKET": socket_path,
                    "KERNELARENA_REDTEAM_TARGET": str(target),
                    "KERNELARENA_REDTEAM_PORT": str(port),
                    "KERNELARENA_REDTEAM_ORPHAN": orphan,
                    "KERNELARENA_REDTEAM_HOME_FILE": str(home_file),
                    "KERNELARENA_REDTEAM_CACHES": str(sandbox_caches_root()),
                    "REDTEAM_SECRET_TOKEN": SECRET,
                }
            ),
        ):
            benchmark = _run(tmp_path / "dataset", list(ATTACKS), device)
            assert not _processes_named(orphan), "an orphan of a reference outlived the run"
        assert (reached_unix, reached_tcp) == ([], [])
    finally:
        home_file.unlink()
        planted = PLANTED.exists()
        PLANTED.unlink(missing_ok=True)
    assert not target.exists(), "a reference wrote outside its sandbox"
    assert not planted, "a reference planted a file in the library solutions' caches"
    _reported_as_the_dataset_s(benchmark)


def _reported_as_the_dataset_s(benchmark: Benchmark) -> None:
    summary = benchmark.summary
    assert summary is not None
    traces = {(t.definition, t.workload.axes["n"]): t for t in summary.traces}
    skipped = {(job.definition.name, job.workload.axes["n"]): why for job, why in summary.skipped}
    honest = traces[("vector_scale", 64)].evaluation
    assert honest is not None and honest.status is Status.PASSED, honest
    assert honest.performance is not None and honest.performance.reference_latency_ms > 0
    for stem, phrase in ATTACKS.items():
        name = f"reference_{stem}"
        size = SIZES.get(stem, (64,))[-1]
        assert (name, size) not in traces, f"{stem}: a trace blames the solution"
        why = skipped.get((name, size), "")
        assert f"the definition's reference of '{name}'" in why, f"{stem}: {why!r}"
        assert phrase in why, f"{stem}: {why!r} lacks {phrase!r}"
        assert SECRET not in why
    # Its sandbox died on one workload; the definition's other one ran in a new one.
    again = traces[("reference_crashes_on_seven", 64)].evaluation
    assert again is not None and again.status is Status.PASSED, again


@pytest.mark.timeout(600)
def test_references_in_the_judge_on_request(tmp_path: Path) -> None:
    """``KERNELARENA_REFERENCE_SANDBOX=0`` (a diagnosis): references run in the judge as before;
    a broken one is still the dataset's problem."""
    with (
        _environment({"KERNELARENA_REFERENCE_SANDBOX": "0"}),
        pytest.warns(UserWarning, match="run in the judge, unconfined"),
    ):
        benchmark = _run(tmp_path / "dataset", ["raises"])
    summary = benchmark.summary
    assert summary is not None
    honest = {t.definition: t for t in summary.traces}["vector_scale"].evaluation
    assert honest is not None and honest.status is Status.PASSED, honest
    (job, why), *_ = summary.skipped
    assert job.definition.name == "reference_raises"
    assert "the definition's reference of 'reference_raises' raised: ValueError" in why, why
