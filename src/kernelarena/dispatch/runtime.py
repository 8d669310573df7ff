"""ApplyRuntime: what apply needs while a program runs: the dataset, a table per (definition,
hardware, ranking figure), built solutions per (solution, device), and the workload recorder when
tracing. ``rank_by``: ``auto`` (eager per-call time outside CUDA graph capture, GPU time inside),
``eager`` or ``gpu`` (always that figure). With ``verify`` (the default), a solution kernelarena
does not ship is compared with the reference on its first call at each key, and dropped for the
process on a mismatch (``first_use.py``); ``ready`` holds the (solution, device, definition, key)
slots tried so far, which a CUDA graph capture may call.

Everything here is reached only on the slow path (the first call of a key), under one lock, so
tables and builds happen once per process however many threads call at the same time.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal, get_args

import torch

from kernelarena.compile import BuildError, Runnable, build_solution
from kernelarena.data import Definition, Language, Solution, TraceSet
from kernelarena.dispatch.admit import admitted_for_device
from kernelarena.dispatch.sites import forget_prepared
from kernelarena.dispatch.store import load_or_build
from kernelarena.dispatch.table import ApplyTable, RankBy
from kernelarena.runtime.hardware import HardwareProfile, device_profile

if TYPE_CHECKING:
    from kernelarena.dispatch.tracing import WorkloadRecorder

log = logging.getLogger("kernelarena.dispatch")


@lru_cache(maxsize=1)
def _shipped_hashes() -> dict[str, tuple[str, str]]:
    from kernelarena.library import load_library

    library = load_library()
    return {
        name: (library.definitions[s.definition].content_hash(), s.content_hash())
        for name, s in library.solutions.items()
        if s.definition in library.definitions
    }


def shipped(definition: Definition, solution: Solution) -> bool:
    """Whether ``solution`` for ``definition`` is one kernelarena ships, to the byte (content
    hashes of both equal to the library's): a copy edited by anyone is not."""
    known = _shipped_hashes().get(solution.name)
    return known is not None and known == (definition.content_hash(), solution.content_hash())


RankingMode = Literal["auto", "eager", "gpu"]
Slot = tuple[str, str, str, tuple[int, ...]]  # (solution, device, definition, shape key)


class ApplyWarning(RuntimeWarning):
    """Apply ran something other than the measured winner: a solution dropped after a wrong
    result, or a key first reached inside CUDA graph capture."""


def device_kind(device: torch.device) -> str:
    return "cpu" if device.type == "cpu" else "cuda"


def ranking_mode(value: str | None) -> RankingMode:
    """``rank_by`` as given, else ``$KERNELARENA_RANK_BY``, else ``auto``."""
    chosen = value or os.environ.get("KERNELARENA_RANK_BY") or "auto"
    if chosen not in get_args(RankingMode):
        raise ValueError(
            f"rank_by (or $KERNELARENA_RANK_BY): '{chosen}' is not one of auto, eager, gpu"
        )
    return chosen  # type: ignore[return-value]


def describe_device(device: torch.device) -> HardwareProfile:
    """The device's model name, and for a GPU what apply compares models by."""
    return device_profile(device)


class ApplyRuntime:
    def __init__(
        self,
        trace_set: TraceSet,
        recorder: WorkloadRecorder | None = None,
        *,
        use_cache: bool = True,
        rank_by: str | None = None,
        verify: bool | None = None,
        verify_every: int | None = None,
    ) -> None:
        self.trace_set = trace_set
        self.recorder = recorder
        self.use_cache = use_cache
        self.rank_by = ranking_mode(rank_by)
        self.verify = verify if verify is not None else _environment_flag("KERNELARENA_VERIFY")
        self.verify_every = _every(verify_every)
        self.lock = threading.RLock()
        self.dropped: dict[str, str] = {}  # solution -> why, for the rest of the process
        self.ready: set[Slot] = set()
        self._warned: set[str] = set()
        self._shipped: dict[str, bool] = {}
        self._profiles: dict[torch.device, HardwareProfile] = {}
        self._tables: dict[tuple[str, str, RankBy], ApplyTable] = {}
        self._runnables: dict[tuple[str, str], Runnable | None] = {}

    @property
    def tracing(self) -> bool:
        return self.recorder is not None

    def profile(self, device: torch.device) -> HardwareProfile:
        if device not in self._profiles:
            self._profiles[device] = describe_device(device)
        return self._profiles[device]

    def hardware(self, device: torch.device) -> str:
        return self.profile(device).name

    def table(
        self, definition: Definition, device: torch.device, rank_by: RankBy = "eager"
    ) -> ApplyTable:
        profile = self.profile(device)
        slot = (definition.name, profile.name, rank_by)
        if slot not in self._tables:
            self._tables[slot] = load_or_build(
                definition,
                self.trace_set,
                profile.name,
                device_kind(device),
                rank_by=rank_by,
                profile=profile,
                use_cache=self.use_cache,
            )
        return self._tables[slot]

    def loaded_table(
        self, definition: Definition, device: torch.device, rank_by: RankBy
    ) -> ApplyTable | None:
        """The table if this process has it already (nothing read, nothing built), else None."""
        profile = self._profiles.get(device)
        return (
            None if profile is None else self._tables.get((definition.name, profile.name, rank_by))
        )

    def built(self, name: str, device: torch.device) -> Runnable | None:
        """The solution if this process has built it already (nothing built now), else None."""
        return self._runnables.get((name, str(device)))

    def needs_check(self, definition: Definition, solution: Solution) -> bool:
        """Whether ``solution``'s first call at each key is compared with the reference: with
        verify on, for every solution kernelarena does not ship (``shipped``)."""
        if not self.verify:
            return False
        if solution.name not in self._shipped:
            self._shipped[solution.name] = shipped(definition, solution)
        return not self._shipped[solution.name]

    def drop(self, name: str, why: str) -> None:
        """Never run ``name`` again in this process; every call site forgets what it prepared,
        so no key keeps it."""
        with self.lock:
            if name in self.dropped:
                return
            self.dropped[name] = why
        self.warn_once(name, f"apply: {name} is dropped for this process: {why}")
        forget_prepared()

    def warn_once(self, topic: str, message: str) -> None:
        if topic in self._warned:
            return
        self._warned.add(topic)
        log.info("%s", message)
        warnings.warn(message, ApplyWarning, stacklevel=3)

    def runnable(self, definition: Definition, name: str, device: torch.device) -> Runnable | None:
        """The built solution ``name``, or None (logged once) when it cannot run here."""
        slot = (name, str(device))
        if slot not in self._runnables:
            self._runnables[slot] = self._build(definition, name, device)
        return self._runnables[slot]

    def _build(self, definition: Definition, name: str, device: torch.device) -> Runnable | None:
        solution = self.trace_set.solutions.get(name)
        if solution is None or not admitted_for_device(solution, device_kind(device)):
            return None
        try:
            return build_solution(definition, solution, str(device))
        except BuildError as error:
            log.warning("apply: %s cannot be built here, skipped: %s", name, str(error)[:500])
            return None

    def default_solution(self, definition: Definition, device: torch.device) -> Any:
        """What a built-in operator runs when no measurement decides: the first Python solution that
        targets the device and builds (torch eager: fast on a CPU, checked by the library's tests),
        else the reference. Triton is left out on a CPU: its interpreter is far too slow."""
        from kernelarena.dispatch.calls import reference_solution

        for solution in self._python_solutions(definition, device):
            runnable = self.runnable(definition, solution.name, device)
            if runnable is not None:
                return runnable
        return reference_solution(definition)

    def built_default(self, definition: Definition, device: torch.device) -> Runnable | None:
        """``default_solution`` where that solution is built already, else None: nothing is
        built (inside a CUDA graph capture nothing may be)."""
        for solution in self._python_solutions(definition, device):
            runnable = self.built(solution.name, device)
            if runnable is not None:
                return runnable
        return None

    def _python_solutions(self, definition: Definition, device: torch.device) -> list[Solution]:
        kind = device_kind(device)
        return sorted(
            (
                s
                for s in self.trace_set.solutions_for(definition.name)
                if s.spec.language is Language.PYTHON and s.runs_on(kind)
            ),
            key=lambda s: len(s.spec.dependencies) > 0,  # stable: library order otherwise
        )


def _environment_flag(name: str) -> bool:
    """On unless the variable says 0, false, no or off."""
    return os.environ.get(name, "1").strip().lower() not in ("0", "false", "no", "off")


def _every(given: int | None) -> int:
    """``verify_every`` as given, else ``$KERNELARENA_VERIFY_EVERY``, else 0 (no re-checks)."""
    value = given if given is not None else int(os.environ.get("KERNELARENA_VERIFY_EVERY") or 0)
    if value < 0:
        raise ValueError(f"verify_every (or $KERNELARENA_VERIFY_EVERY): {value} is negative")
    return value
