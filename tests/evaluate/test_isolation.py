"""The sandbox's walls and filters, each checked in a process of its own: the seccomp filter's
table and what it refuses, the environment a sandbox sees, the bounded log reads, and the
confinement of a sandbox started by an unprivileged user."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelarena.evaluate.sandbox import isolation, seccomp
from kernelarena.evaluate.sandbox.confine import confine_sandbox
from kernelarena.evaluate.sandbox.sandboxes import Sandbox

SOURCE = Path(__file__).parents[2] / "src"


def _libseccomp() -> ctypes.CDLL | None:
    name = ctypes.util.find_library("seccomp")
    return ctypes.CDLL(name) if name else None


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_system_call_numbers_match_libseccomp(machine: str) -> None:
    library = _libseccomp()
    if library is None:
        pytest.skip("libseccomp is not installed: nothing to check the table against")
    resolve = library.seccomp_syscall_resolve_name_arch
    resolve.argtypes = (ctypes.c_uint32, ctypes.c_char_p)
    arch = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}[machine]
    column = 0 if machine == "x86_64" else 1
    for name, numbers in {**seccomp.REFUSED, **seccomp.SCREENED}.items():
        assert resolve(arch, name.encode()) == numbers[column], (machine, name)
    assert seccomp.program(machine) is not None
    assert seccomp.program("sparc") is None


_FILTERED = """
import ctypes, fcntl, os, socket, subprocess, termios
from kernelarena.evaluate.sandbox import seccomp
print(seccomp.load())
libc = ctypes.CDLL(None, use_errno=True)
def refused(call):
    try:
        result = call()
    except OSError as error:
        return error.errno
    return ctypes.get_errno() if result == -1 else 0
leader, _ = os.openpty()
print("ptrace", refused(lambda: libc.ptrace(16, os.getppid(), 0, 0)))
print("unshare", refused(lambda: libc.unshare(0x10000000)))
print("tiocsti", refused(lambda: fcntl.ioctl(leader, termios.TIOCSTI, b"x")))
print("packet", refused(lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW)))
print("keyctl", refused(lambda: libc.syscall(250 if os.uname().machine == "x86_64" else 219, 0)))
print("winsize", refused(lambda: fcntl.ioctl(leader, termios.TIOCGWINSZ, bytes(8))))
print("tcp", refused(lambda: socket.socket().close()))
print("child", subprocess.run(["true"]).returncode)
"""


def test_the_filter_refuses_what_a_kernel_never_needs_and_allows_the_rest() -> None:
    if seccomp.program() is None:
        pytest.skip(f"no system-call table for {os.uname().machine}")
    done = subprocess.run(
        [sys.executable, "-c", _FILTERED],
        capture_output=True,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(SOURCE)),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("seccomp refuses"), lines[0]
    results = dict(line.split() for line in lines[1:])
    eperm = "1"
    assert [results[k] for k in ("ptrace", "unshare", "tiocsti", "packet", "keyctl")] == [eperm] * 5
    assert (results["winsize"], results["tcp"], results["child"]) == ("0", "0", "0")


def test_a_sandbox_sees_the_tools_settings_and_none_of_the_users_secrets() -> None:
    environment = {
        "PATH": "/usr/bin",
        "CUDA_HOME": "/usr/local/cuda",
        "TRITON_CACHE_DIR": "/c",
        "LD_LIBRARY_PATH": "/l",
        "KERNELARENA_CACHE": "/k",
        "AWS_SECRET_ACCESS_KEY": "s",
        "GITHUB_TOKEN": "t",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent",
        "TMUX": "/tmp/tmux-0/default,1,0",
        "DISPLAY": ":0",
        "WANDB_API_KEY": "w",
    }
    kept = isolation.sandbox_environment(environment)
    assert set(kept) == {
        "PATH",
        "CUDA_HOME",
        "TRITON_CACHE_DIR",
        "LD_LIBRARY_PATH",
        "KERNELARENA_CACHE",
    }
    more = isolation.sandbox_environment(dict(environment, KERNELARENA_SANDBOX_ENV="DISPLAY"))
    assert set(more) - set(kept) == {"DISPLAY", "KERNELARENA_SANDBOX_ENV"}


def test_no_folder_holding_the_home_is_bound() -> None:
    home = os.path.expanduser("~")
    bound = isolation.python_paths([home, os.path.dirname(home), "/", str(SOURCE)])
    assert str(SOURCE) in bound
    assert not [p for p in bound if home == p or home.startswith(p.rstrip("/") + "/")]


def test_the_judge_reads_a_fixed_tail_of_a_huge_log(tmp_path: Path) -> None:
    log = tmp_path / "sandbox.log"
    with open(log, "wb") as handle:  # 3 GiB, sparse: what a solution that printed it leaves
        handle.truncate(3 << 30)
        handle.seek(0, os.SEEK_END)
        handle.write(b"the last line\n")
    holder = SimpleNamespace(log_path=log)
    tracemalloc.start()
    try:
        tail = Sandbox.log_since(holder, 0)  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tail.endswith("the last line\n") and len(tail) == 6000
    assert peak < 1 << 20, peak
    assert Sandbox.log_since(holder, (3 << 30) + 4) == "last line\n"  # type: ignore[arg-type]


_AS_A_USER = """
from kernelarena.evaluate.sandbox.isolation import trial
where, confinement = trial()
print(where)
print(confinement)
"""


def test_a_sandbox_started_by_an_unprivileged_user_is_confined_or_says_why_not(
    tmp_path: Path,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("dropping privileges needs root; this run is unprivileged already")
    closed = [p for p in (os.path.realpath(sys.executable), str(SOURCE)) if not _open_to_all(p)]
    if closed:
        pytest.skip(f"not open to other users here, so no sandbox of theirs can start: {closed}")
    os.chmod(tmp_path, 0o777)
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_AS_A_USER)],
        capture_output=True,
        text=True,
        user=65534,
        group=65534,
        extra_groups=[],
        cwd=tmp_path,
        env=dict(
            os.environ,
            PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
            HOME=str(tmp_path),
            TMPDIR=str(tmp_path),
            KERNELARENA_CACHE=str(tmp_path / "cache"),
            KERNELARENA_BYTECODE="0",
        ),
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    where, confinement = done.stdout.strip().splitlines()[-2:]
    assert "uid 65534" in where, where
    assert "no capabilities" in confinement and "seccomp refuses" in confinement, confinement
    if confinement.startswith("NO namespaces"):
        assert "(" in confinement.split(":")[0], "the missing namespaces must say why"
    else:
        assert confinement.startswith("namespaces (user, pid, net"), confinement
        assert where.startswith("pid 2 "), where  # bwrap's init is 1 in its own PID namespace


def _open_to_all(path: str) -> bool:
    """Whether every user can reach and read ``path`` (each folder above it searchable)."""
    parts = Path(path).parents
    return all(p.stat().st_mode & 0o001 for p in parts) and Path(path).stat().st_mode & 0o004 > 0


def test_an_unprivileged_user_gets_namespaces_or_is_told_why_and_keeps_every_other_layer(
    tmp_path: Path,
) -> None:
    """In a child that dropped root for ``nobody`` (no interpreter to start, so the test runs
    wherever the interpreter lives): the namespaces probe and the layers a sandbox raises."""
    if os.geteuid() != 0:
        pytest.skip("dropping privileges needs root; this run is unprivileged already")
    reader, writer = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
            found = isolation._probed_walls.__wrapped__()
            held = confine_sandbox([str(tmp_path)])
            os.write(writer, f"{found.available}|{found.why_not}|{held}".encode())
        except BaseException as error:
            os.write(writer, f"False|the child failed: {error!r}|".encode())
        finally:
            os._exit(0)
    os.close(writer)
    with os.fdopen(reader) as pipe:
        available, why_not, held = pipe.read().split("|")
    os.waitpid(child, 0)
    assert "no capabilities" in held and "seccomp refuses" in held, held
    assert available == "True" or why_not, "namespaces missing without a reason"


def test_doctor_says_which_protections_hold_and_names_a_missing_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from kernelarena.cli import app

    monkeypatch.setenv("KERNELARENA_NAMESPACES", "0")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "namespaces: NO, KERNELARENA_NAMESPACES=0" in result.output
    assert "NO namespaces (KERNELARENA_NAMESPACES=0)" in result.output
    assert "seccomp refuses" in result.output
    assert "CPU sandboxes: started as programs (no namespaces here)" in result.output
    from kernelarena.dispatch import fastcall

    assert f"apply fast path: {fastcall.status()}" in result.output


def test_doctor_says_cpu_sandboxes_fork_where_the_walls_stand() -> None:
    from typer.testing import CliRunner

    from kernelarena.cli import app
    from kernelarena.evaluate.sandbox.isolation import walls

    if not walls().available:
        pytest.skip(f"no namespaces on this machine: {walls().why_not}")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "CPU sandboxes: forked from a zygote" in result.output
    assert "definitions' references: in a sandbox of their own" in result.output


def test_doctor_says_references_run_in_the_judge_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from typer.testing import CliRunner

    from kernelarena.cli import app

    monkeypatch.setenv("KERNELARENA_REFERENCE_SANDBOX", "0")
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    assert "definitions' references: in the judge, UNCONFINED" in result.output


def test_compilers_outside_the_system_folders_are_bound_with_their_prefix(tmp_path: Path) -> None:
    """A GPU image's gcc in /opt/gcc/bin (named by CXX): torch's extension builds, nvcc's -ccbin
    and Triton's launcher build call it, and it needs its whole prefix."""
    from kernelarena.evaluate.sandbox.isolation import compiler_paths

    prefix = tmp_path / "gcc"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "libexec").mkdir()
    for name in ("g++", "gcc"):
        program = prefix / "bin" / name
        program.write_text("#!/bin/sh\n")
        program.chmod(0o755)
    found = compiler_paths({"PATH": "/usr/bin:/bin", "CXX": str(prefix / "bin" / "g++")})
    assert found == [str(prefix)]
    found = compiler_paths({"PATH": f"{prefix / 'bin'}:/usr/bin"})
    assert found == [str(prefix)]
    assert compiler_paths({"PATH": "/usr/bin:/bin"}) == []
