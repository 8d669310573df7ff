"""The command line: list, show, validate, run (with --json and exit codes), export."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from kernelarena.cli import app
from tests.evaluate.bad_solutions import CPU_CASES, trace_set

runner = CliRunner()


def test_list_shows_the_library(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["list", "--dataset", str(tmp_path / "empty"), "--library"])
    assert result.exit_code == 0, result.output
    assert "scale_bf16" in result.output


def test_show_a_definition_and_a_family(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(app, ["show", "scale_bf16", "--dataset", str(tmp_path / "empty")])
    assert result.exit_code == 0, result.output
    assert "scale_bf16_triton" in result.output and "workloads" in result.output
    family = runner.invoke(app, ["show", "scale", "--dataset", str(tmp_path / "empty")])
    assert "scale_fp16" in family.output
    unknown = runner.invoke(app, ["show", "no_such_op", "--dataset", str(tmp_path / "empty")])
    assert unknown.exit_code == 2 and "matches no definition" in unknown.output


def test_run_json_and_exit_codes(tmp_path: Path) -> None:
    dataset = tmp_path / "dataset"
    trace_set({"raises": CPU_CASES["raises"]}, root=dataset)
    failing = runner.invoke(
        app,
        [
            "run",
            "vector_scale",
            "--dataset",
            str(dataset),
            "--device",
            "cpu",
            "--json",
            "--trials",
            "1",
        ],
    )
    assert failing.exit_code == 1
    payload = json.loads(failing.stdout.strip().splitlines()[-1])
    statuses = {t["solution"]: t["evaluation"]["status"] for t in payload["traces"]}
    assert statuses == {"vector_scale_good_first": "PASSED", "vector_scale_raises": "RUNTIME_ERROR"}
    assert payload["environments"][0]["ceilings"]["copy_gbps"] > 0
    # Where the worker's start-up went: listed with the environment, kept out of the traces.
    startup = payload["environments"][0]["startup"]
    assert startup["total_s"] > startup["python_s"] > 0
    phases = startup["phases_s"]
    assert list(phases) == ["import_torch_s", "import_kernelarena_s", "ceilings_s", "environment_s"]
    assert phases["import_torch_s"] > 0 and sum(phases.values()) < startup["total_s"]
    assert all("startup" not in t["evaluation"]["environment"] for t in payload["traces"])
    allowed = runner.invoke(
        app,
        [
            "run",
            "vector_scale",
            "--dataset",
            str(dataset),
            "--device",
            "cpu",
            "--resume",
            "--allow-failures",
        ],
    )
    assert allowed.exit_code == 0, allowed.output
    assert "2 already done" in allowed.output
    assert "worker start-up" in allowed.output and "import torch" in allowed.output


def test_run_launches_its_workers_before_it_loads_the_schemas() -> None:
    """A worker takes seconds to import torch: it is launched before this process imports the
    schemas and loads the datasets (which then overlap its start), not after."""
    code = (
        "import sys\n"
        "from kernelarena.evaluate.executors.local import LocalExecutor\n"
        "def launch(self):\n"
        "    print(sorted(m for m in ('kernelarena.data', 'torch') if m in sys.modules))\n"
        "    raise SystemExit(0)\n"
        "LocalExecutor.launch = launch\n"
        "from kernelarena.cli import main\n"
        "sys.argv = ['kernelarena', 'run', '--device', 'cpu']\n"
        "main()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0 and done.stdout.strip() == "[]", done.stdout + done.stderr


def test_run_rejects_unknown_names(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    result = runner.invoke(
        app, ["run", "no_such_op", "--dataset", str(tmp_path / "empty"), "--device", "cpu"]
    )
    assert result.exit_code == 2 and "matches no definition" in result.output


def test_export_writes_a_loadable_dataset(tmp_path: Path) -> None:
    from kernelarena.data import TraceSet

    (tmp_path / "empty").mkdir()
    result = runner.invoke(
        app, ["export", str(tmp_path / "out"), "--dataset", str(tmp_path / "empty")]
    )
    assert result.exit_code == 0, result.output
    exported = TraceSet.load(tmp_path / "out", strict=True)
    assert "scale_bf16" in exported.definitions


def test_run_imports_a_module_that_registers_solutions(tmp_path: Path, monkeypatch: object) -> None:
    """`--import` brings a user's registered solutions in; they run in the worker and pass."""
    dataset = tmp_path / "dataset"
    trace_set({}, root=dataset)
    module = tmp_path / "user_kernels_for_cli_test.py"
    module.write_text(
        "import kernelarena\n\n\n"
        "def scale_in_place_of_out(x, factor, out):\n"
        "    out.copy_(x * factor)\n\n\n"
        'kernelarena.register("vector_scale", scale_in_place_of_out, name="vector_scale_user")\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # type: ignore[attr-defined]
    result = runner.invoke(
        app,
        [
            "run",
            "vector_scale",
            "--dataset",
            str(dataset),
            "--device",
            "cpu",
            "--json",
            "--trials",
            "1",
            "--solutions",
            "vector_scale_user",
            "--import",
            "user_kernels_for_cli_test",
        ],
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(result.stdout.strip().splitlines()[-1])
    assert [(t["solution"], t["evaluation"]["status"]) for t in payload["traces"]] == [
        ("vector_scale_user", "PASSED")
    ]
