"""Moved to ``kernelarena.compile`` (issue 38: common tools and ignore templates take a folder named
build/ for build output); this name stays an alias of that package for one release.

``import kernelarena.build``, ``from kernelarena.build import build_solution`` and
``import kernelarena.build.cuda`` give the modules of compile/ themselves, not second copies, so a
``BuildError`` raised under one name is caught under the other. The first import warns.
"""

import importlib
import pkgutil
import sys
import warnings

from kernelarena import compile as _moved

warnings.warn(
    "kernelarena.build is now kernelarena.compile; the old name goes in the next release",
    DeprecationWarning,
    stacklevel=2,  # the importing line: warn skips the import system's frames itself
)

# Every submodule under its old name too: the import system finds them in sys.modules before it
# would look for files, which it would otherwise load a second time as new modules.
for _submodule in pkgutil.iter_modules(_moved.__path__):
    sys.modules[f"{__name__}.{_submodule.name}"] = importlib.import_module(
        f"{_moved.__name__}.{_submodule.name}"
    )
sys.modules[__name__] = _moved
