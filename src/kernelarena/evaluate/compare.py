"""Moved to ``kernelarena.runtime.compare`` (issue 38: what evaluate and dispatch both need lives in
runtime/); this name stays an alias of that module for one release."""

import sys

from kernelarena.runtime import compare as _moved

sys.modules[__name__] = _moved
