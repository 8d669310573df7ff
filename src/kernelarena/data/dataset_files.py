"""Writes into a dataset folder that stay inside it.

A dataset is data from anyone (a published FlashInfer-Trace folder, a download), and a symlink in it
must not turn kernelarena's appends and new files into writes elsewhere: an append to a file of the
user's, or the truncation of a torn last line there. So every write resolves its path, symlinks
and all, refuses one that lands outside the dataset's own resolved folder, and opens the file
without following a symlink at its last component (a link swapped in after the check fails the
open). Symlinks that stay inside the folder (a traces/ folder linked to another of its folders) are
followed. Reading is not guarded: FlashInfer-Trace result folders link definitions/, workloads/
and blob/ to the trace repository beside them, which kernelarena reads and never writes. A file
with a second hard link is refused as well: the other name may be anywhere, and it would change too.

The names that make up a path (``op_type``, definition and solution names) are single components,
checked when a file is loaded (``_base.check_path_component``); this module catches the rest.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path

from kernelarena.data._base import Schema


class DatasetPathError(ValueError):
    """A write into a dataset that would land outside it, or on something not a plain file."""


def resolved_inside(root: Path, path: Path) -> Path:
    """``path`` with every symlink resolved, once it is known to lie inside ``root`` (also
    resolved); a ``DatasetPathError`` that names both otherwise."""
    real_root, real = root.resolve(), path.resolve()
    if real == real_root or not real.is_relative_to(real_root):
        raise DatasetPathError(
            f"{path}: leads outside the dataset folder {real_root} (to {real}, through a "
            "symlink); kernelarena writes only inside the dataset, so nothing was written"
        )
    return real


def _open_plain_file(real: Path, flags: int) -> int:
    """A descriptor of the regular file ``real`` (already resolved), opened without following a
    symlink; refused when it is something else or has another hard link."""
    try:
        before = os.lstat(real)
    except FileNotFoundError:
        before = None
    if before is not None and not stat.S_ISREG(before.st_mode):
        raise DatasetPathError(f"{real}: not a plain file; nothing was written")
    fd = os.open(real, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        raise DatasetPathError(
            f"{real}: a file with {info.st_nlink} hard links (another name elsewhere would change "
            "too); copy it to a file of its own to write there"
        )
    return fd


def write_new(path: Path, model: Schema, *, root: Path) -> None:
    write_new_text(
        path, json.dumps(model.to_json_dict(), indent=2, ensure_ascii=False) + "\n", root=root
    )


def write_lines(path: Path, models: Sequence[Schema], *, root: Path) -> None:
    write_new_text(path, "".join(m.to_json() + "\n" for m in models), root=root)


def write_new_text(path: Path, text: str, *, root: Path) -> None:
    """Write ``text`` to a new file of the dataset at ``root``; an existing file must already say
    the same."""
    if path.exists():
        if path.read_text(encoding="utf-8") == text:
            return
        raise FileExistsError(f"{path} exists with other content; not replacing it")
    write_new_bytes(path, text.encode("utf-8"), root=root)


def write_new_bytes(path: Path, data: bytes, *, root: Path) -> None:
    """A new file inside the dataset at ``root`` holding ``data``; never over an existing one."""
    real = resolved_inside(root, path)
    real.parent.mkdir(parents=True, exist_ok=True)
    fd = _open_plain_file(real, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def append_line(path: Path, model: Schema, *, root: Path) -> None:
    """Append one JSON line to a file inside the dataset at ``root`` and make it durable before
    returning (a kill loses nothing written). A last line without its newline is either complete
    (kept, and ended) or torn by a kill in the middle of its write (removed: it recorded nothing,
    and ``--resume`` runs its job again)."""
    real = resolved_inside(root, path)
    real.parent.mkdir(parents=True, exist_ok=True)
    line = model.to_json() + "\n"
    fd = _open_plain_file(real, os.O_RDWR | os.O_CREAT | os.O_APPEND)
    with os.fdopen(fd, "a+b") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() > 0:
            handle.seek(-1, os.SEEK_END)
            if handle.read(1) != b"\n":
                handle.seek(0)
                data = handle.read()
                start = data.rfind(b"\n") + 1
                try:
                    json.loads(data[start:])
                    line = "\n" + line
                except ValueError:
                    handle.truncate(start)
        handle.write(line.encode("utf-8"))
        handle.flush()
        os.fsync(handle.fileno())
