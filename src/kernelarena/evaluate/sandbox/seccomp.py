"""A seccomp filter that refuses what a kernel, its build and its benchmark never need.

Allowed by default, refused (EPERM) by name: pushing keystrokes into a terminal (``ioctl``
TIOCSTI, TIOCLINUX), reading or steering other processes (``ptrace``, ``process_vm_*``), mounts
and new namespaces (so the sandbox cannot rebuild what confines it), the kernel's keyrings, BPF,
performance counters, io_uring (whose operations seccomp cannot see), kernel modules, kexec and
reboot, raw and packet sockets. ``clone3`` answers ENOSYS (its flags sit behind a pointer that
a filter cannot read), so the C library falls back to ``clone``, whose namespace flags are
refused. Foreign system-call ABIs (x32, 32-bit) are refused whole.

The program is a dozen lines of classic BPF written here, not compiled by libseccomp: the Python
bindings find the library by running ``ldconfig`` (0.1 s on a loaded machine, on the path of a
sandbox's start) and a system library is not on every host. The system-call numbers are checked
against libseccomp's tables where it is installed (``tests/evaluate/test_seccomp.py``).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import struct

# Classic BPF opcodes (linux/filter.h) and seccomp's return values and data layout.
_LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_AND = 0x54  # BPF_ALU | BPF_AND | BPF_K
_RETURN = 0x06  # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000
_KILL_PROCESS = 0x80000000
_NUMBER, _ARCH = 0, 4


def _errno(code: int) -> int:
    return 0x00050000 | code


def _argument(index: int) -> int:
    """Offset of the low 32 bits of argument ``index`` in seccomp_data (little-endian)."""
    return 16 + 8 * index


_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
_AF_PACKET, _SOCK_RAW, _SOCK_TYPE_MASK = 17, 3, 0xF
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME (0x80).
_NEW_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000
_NEW_NAMESPACES |= 0x10000000 | 0x20000000 | 0x40000000 | 0x80

# name -> (x86_64, aarch64). aarch64 uses the generic table (include/uapi/asm-generic/unistd.h).
REFUSED: dict[str, tuple[int, int]] = {
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "unshare": (272, 97),
    "setns": (308, 268),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "reboot": (169, 142),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "name_to_handle_at": (303, 264),
    "open_by_handle_at": (304, 265),
}
# Checked by argument: name -> (x86_64, aarch64).
SCREENED: dict[str, tuple[int, int]] = {
    "ioctl": (16, 29),
    "socket": (41, 198),
    "clone": (56, 220),
    "clone3": (435, 435),
    "seccomp": (317, 277),
}
# AUDIT_ARCH_* for each column above; on x86_64, numbers from bit 30 up are the x32 ABI.
_ARCHES = {"x86_64": (0, 0xC000003E), "aarch64": (1, 0xC00000B7)}
_X32_BIT = 0x40000000


def _step(code: int, k: int, true: int = 0, false: int = 0) -> bytes:
    return struct.pack("HBBI", code, true, false, k)


def _refuse_if(value: int, action: int) -> list[bytes]:
    return [_step(_JUMP_EQUAL, value, 0, 1), _step(_RETURN, action)]


def _screened(number: int, block: list[bytes]) -> list[bytes]:
    """``block`` (which ends in a return) runs for system call ``number``; others skip it."""
    return [_step(_JUMP_EQUAL, number, 0, len(block)), *block]


def program(machine: str | None = None) -> bytes | None:
    """The filter for ``machine`` (default: this one) as sock_filter structs; None where this
    module has no system-call table for it."""
    arch = _ARCHES.get(machine or os.uname().machine)
    if arch is None:
        return None
    column, audit_arch = arch
    refuse = _errno(errno.EPERM)
    steps = [_step(_LOAD_WORD, _ARCH), _step(_JUMP_EQUAL, audit_arch, 1, 0)]
    steps += [_step(_RETURN, _KILL_PROCESS), _step(_LOAD_WORD, _NUMBER)]
    if column == 0:
        steps += [_step(_JUMP_AT_LEAST, _X32_BIT, 0, 1), _step(_RETURN, refuse)]
    for numbers in REFUSED.values():
        steps += _refuse_if(numbers[column], refuse)
    screened = {name: numbers[column] for name, numbers in SCREENED.items()}
    ioctl = [_step(_LOAD_WORD, _argument(1))]
    ioctl += _refuse_if(_TIOCSTI, refuse) + _refuse_if(_TIOCLINUX, refuse)
    steps += _screened(screened["ioctl"], [*ioctl, _step(_RETURN, _ALLOW)])
    socket = [_step(_LOAD_WORD, _argument(0)), *_refuse_if(_AF_PACKET, refuse)]
    socket += [_step(_LOAD_WORD, _argument(1)), _step(_AND, _SOCK_TYPE_MASK)]
    socket += [*_refuse_if(_SOCK_RAW, refuse), _step(_RETURN, _ALLOW)]
    steps += _screened(screened["socket"], socket)
    clone = [_step(_LOAD_WORD, _argument(0)), _step(_JUMP_ANY_BIT, _NEW_NAMESPACES, 0, 1)]
    clone += [_step(_RETURN, refuse), _step(_RETURN, _ALLOW)]
    steps += _screened(screened["clone"], clone)
    steps += _refuse_if(screened["clone3"], _errno(errno.ENOSYS))
    steps.append(_step(_RETURN, _ALLOW))
    return b"".join(steps)


class _Program(ctypes.Structure):
    _fields_ = [("length", ctypes.c_ushort), ("steps", ctypes.c_void_p)]


_PR_SET_NO_NEW_PRIVS = 38
_SECCOMP_SET_MODE_FILTER = 1
_SECCOMP_FILTER_FLAG_TSYNC = 1


def load() -> str:
    """Install the filter on every thread of this process, for good (its children inherit it).
    Returns what holds, for the log."""
    machine = os.uname().machine
    code = program(machine)
    if code is None:
        return f"no seccomp filter: no system-call table for {machine}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    steps = ctypes.create_string_buffer(code, len(code))
    filter_program = _Program(len(code) // 8, ctypes.cast(steps, ctypes.c_void_p))
    number = SCREENED["seccomp"][_ARCHES[machine][0]]
    # TSYNC: the threads that torch and the CUDA driver started before this call are filtered too.
    result = libc.syscall(
        number,
        _SECCOMP_SET_MODE_FILTER,
        _SECCOMP_FILTER_FLAG_TSYNC,
        ctypes.byref(filter_program),
    )
    if result != 0:
        reason = os_error(ctypes.get_errno()) if result < 0 else f"thread {result} refused"
        return f"no seccomp filter: the kernel refused it ({reason})"
    return f"seccomp refuses {len(REFUSED) + 4} kinds of system call"


def os_error(code: int) -> str:
    with contextlib.suppress(ValueError):
        return errno.errorcode[code]
    return str(code)
