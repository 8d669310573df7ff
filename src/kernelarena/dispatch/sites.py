"""The call sites apply has decorated, each told when what it prepared no longer holds.

A site registers once (``apply.CallSite``). ``reset_all`` makes every site forget its runtime and
what it prepared: apply was turned on or off (``state.py``), or a solution was dropped for the
process (``forget_prepared``, from ``runtime.ApplyRuntime.drop``). Both run under ``lock``, the
lock ``state.py`` changes the runtime under.
"""

from __future__ import annotations

import threading
import weakref
from typing import Protocol


class Resettable(Protocol):
    def reset(self) -> None: ...


lock = threading.RLock()
_sites: weakref.WeakSet[Resettable] = weakref.WeakSet()


def register(site: Resettable) -> None:
    _sites.add(site)


def reset_all() -> None:
    """Every site forgets its runtime and what it prepared (the caller holds ``lock``)."""
    for site in list(_sites):
        site.reset()


def forget_prepared() -> None:
    """Every call site forgets the callables it prepared (a solution was dropped): the next
    call of each key resolves it again."""
    with lock:
        reset_all()
