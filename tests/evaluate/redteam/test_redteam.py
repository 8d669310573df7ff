"""Attacks on the machine, not the verdict: a solution that reaches out of its sandbox. Each runs
through the real engine beside honest solutions; each must fail with a log naming what was
refused, leave nothing changed outside its own folders and nothing running after the run, and
the honest solutions in the same run must pass. (``docs/evaluation.md``, "Threat model".)"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelarena.data import Status, Trace
from kernelarena.evaluate.executors.benchmark import Benchmark
from kernelarena.evaluate.executors.jobs import Timeouts
from kernelarena.evaluate.options import Options
from kernelarena.evaluate.sandbox.isolation import walls
from tests.evaluate.bad_solutions import FIXTURES, trace_set
from tests.evaluate.redteam import servers

ATTACKS = Path(__file__).parents[2] / "fixtures" / "redteam"
REFUSED = Status.RUNTIME_ERROR
SECRET = f"secret-{uuid.uuid4().hex}"
FILE_LIMIT = 32 << 20

# solution file -> (expected status, destination-passing style, a phrase the log must contain)
ATTACKS_ON_THE_HOST: dict[str, tuple[Status, bool, str]] = {
    "asks_command_server": (REFUSED, True, "FileNotFoundError"),
    "asks_abstract_server": (REFUSED, True, "ConnectionRefusedError"),
    "connects_loopback": (REFUSED, True, "ConnectionRefusedError"),
    "orphans_a_process": (REFUSED, True, "process(es) running after its job"),
    "injects_keystrokes": (REFUSED, True, "TIOCSTI: [Errno 1] Operation not permitted"),
    "reads_secrets": (REFUSED, True, "the environment holds no REDTEAM_SECRET_TOKEN"),
    "floods_log": (REFUSED, True, "File too large"),
}
BLOCK_DEVICE = {"writes_block_device": (REFUSED, True, "FileNotFoundError")}


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def _loop_device(image: Path) -> Iterator[str | None]:
    """A loop device over a scratch image (never a real disk), where this is root and has
    losetup and loop devices; else None."""
    losetup = shutil.which("losetup")
    if os.geteuid() != 0 or losetup is None:
        yield None
        return
    image.write_bytes(b"\0" * (1 << 20))
    made = subprocess.run([losetup, "-f", "--show", str(image)], capture_output=True, text=True)
    if made.returncode != 0:
        yield None
        return
    device = made.stdout.strip()
    try:
        yield device
    finally:
        subprocess.run([losetup, "-d", device], capture_output=True)


def _processes_named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if entry.name.isdigit() and (entry / "comm").read_text().strip() == name:
                found.append(int(entry.name))
    return found


def _run(cases: dict[str, tuple[Status, bool, str]], root: Path) -> dict[str, Trace]:
    benchmark = Benchmark(
        trace_set(cases, root=root, folders=(ATTACKS, FIXTURES)),
        devices="cpu",
        options=Options(trials=2, budget_ms=20, max_iterations=20),
        timeouts=Timeouts(build_s=120, run_s=30, startup_s=300),
    )
    return {t.solution or "": t for t in benchmark.run_all()}


@pytest.mark.timeout(600)
def test_attacks_on_the_host_are_refused(tmp_path: Path) -> None:
    if not walls().available:
        pytest.skip(f"no namespaces on this machine: {walls().why_not}")
    (tmp_path / "host").mkdir()
    target = tmp_path / "host" / "pwned.txt"
    home_file = Path.home() / f".kernelarena-redteam-{uuid.uuid4().hex}"
    home_file.write_text(SECRET)
    master, follower = os.openpty()
    orphan = f"ka-orphan-{uuid.uuid4().hex[:5]}"
    shm = f"kernelarena-redteam-{uuid.uuid4().hex}"
    unix, socket_path = servers.command_server(tmp_path / "host")
    abstract, abstract_name = servers.abstract_server()
    tcp, port = servers.loopback_server()
    cases = dict(
        ATTACKS_ON_THE_HOST,
        leaves_shared_memory=(Status.PASSED, True, ""),
        looks_around=(Status.PASSED, True, ""),
    )
    try:
        with (
            _loop_device(tmp_path / "scratch.img") as block,
            servers.serving(unix) as reached_unix,
            servers.serving(abstract) as reached_abstract,
            servers.serving(tcp) as reached_tcp,
            _environment(
                {
                    "KERNELARENA_REDTEAM_SOCKET": socket_path,
                    "KERNELARENA_REDTEAM_ABSTRACT": abstract_name,
                    "KERNELARENA_REDTEAM_TARGET": str(target),
                    "KERNELARENA_REDTEAM_PORT": str(port),
                    "KERNELARENA_REDTEAM_ORPHAN": orphan,
                    "KERNELARENA_REDTEAM_TTY": os.ttyname(follower),
                    "KERNELARENA_REDTEAM_HOME_FILE": str(home_file),
                    "KERNELARENA_REDTEAM_SHM": shm,
                    "KERNELARENA_REDTEAM_BLOCK": block or "",
                    "REDTEAM_SECRET_TOKEN": SECRET,
                    "KERNELARENA_SANDBOX_FILE_BYTES": str(FILE_LIMIT),
                }
            ),
        ):
            if block is not None:
                cases.update(BLOCK_DEVICE)
            by_solution = _run(cases, tmp_path / "dataset")
            assert not _processes_named(orphan), "an orphan of the sandbox outlived the run"
            os.set_blocking(master, False)
            with contextlib.suppress(BlockingIOError):
                assert os.read(master, 1024) == b"", "keystrokes reached the test's terminal"
            if block is not None:
                assert (tmp_path / "scratch.img").read_bytes() == b"\0" * (1 << 20)
        assert (reached_unix, reached_abstract, reached_tcp) == ([], [], [])
    finally:
        home_file.unlink()
        os.close(master)
        os.close(follower)
    _verdicts(cases, by_solution)
    assert not target.exists()
    assert not Path(f"/dev/shm/{shm}").exists(), "a sandbox's /dev/shm outlived it"


def _verdicts(cases: dict[str, tuple[Status, bool, str]], by_solution: dict[str, Trace]) -> None:
    for stem, (status, _, phrase) in cases.items():
        evaluation = by_solution[f"vector_scale_{stem}"].evaluation
        assert evaluation is not None
        assert evaluation.status is status, f"{stem}: {evaluation.status}:\n{evaluation.log}"
        assert phrase in evaluation.log, f"{stem}: log lacks {phrase!r}:\n{evaluation.log}"
        assert SECRET not in evaluation.log, f"{stem}: the secret reached the trace"
        assert len(evaluation.log) <= 8000, f"{stem}: a trace log of {len(evaluation.log)} chars"
    good = by_solution["vector_scale_good_first"].evaluation
    assert good is not None and good.status is Status.PASSED, good
