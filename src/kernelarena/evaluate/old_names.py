"""The old names of the modules that moved into evaluate's wings (issue 38), aliases for one
release: ``import kernelarena.evaluate.worker`` gives ``kernelarena.evaluate.judge.worker`` itself
(not a second copy, so monkeypatching and ``isinstance`` reach the same code), and
``python -m kernelarena.evaluate.worker`` runs it. ``kernelarena.evaluate.sandbox``, once the
sandbox's module, is now its wing; ``python -m kernelarena.evaluate.sandbox`` still starts a
sandbox (``sandbox/__main__.py``).

A finder on ``sys.meta_path`` rather than a file per old name: the old files are gone, so git
follows each module to its wing, and the import system asks the finder only for names that no
file answers.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import CodeType, ModuleType

WINGS = {
    "judge": (
        "ceilings clocked_sandboxes crosscheck evaluator judge_clock kept_draws pass_check "
        "reference_sandbox references shared_sets stage_clock timing_check verdicts warm_up worker"
    ),
    "sandbox": (
        "arena arena_cuda bytecode confine confined_build descriptors error_ratio forked "
        "graph_timing isolation reference_runs reference_serving sandboxes seccomp "
        "solution_caches stream_order timing triton_warmth zygote"
    ),
    "executors": (
        "benchmark build_pool build_process devices job_stages jobs leftovers local ray_actor "
        "ray_executor ray_placement ray_wire runner worker_process"
    ),
}

MOVED = {
    f"{__package__}.{name}": f"{__package__}.{wing}.{name}"
    for wing, names in WINGS.items()
    for name in names.split()
}


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module under its new one."""

    def __init__(self, new: str) -> None:
        self.new = new
        self._spec: ModuleSpec | None = None

    def create_module(self, spec: ModuleSpec) -> ModuleType:
        module = importlib.import_module(self.new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._spec  # the import system gave it the old name's spec

    def get_code(self, fullname: str) -> CodeType | None:
        """What ``python -m`` runs under the old name: the new module's code."""
        spec = importlib.util.find_spec(self.new)
        loader = spec.loader if spec is not None else None
        if not isinstance(loader, importlib.abc.InspectLoader):
            raise ImportError(f"{self.new} has no code to run", name=self.new)
        return loader.get_code(self.new)


class _OldNames(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        found = importlib.util.find_spec(new)
        origin = found.origin if found is not None else None
        return importlib.util.spec_from_loader(fullname, _Alias(new), origin=origin)


def install() -> None:
    """Answer the old names from now on (once per process: the package's import calls it)."""
    if not any(isinstance(finder, _OldNames) for finder in sys.meta_path):
        sys.meta_path.append(_OldNames())
