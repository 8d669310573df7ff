"""References that inline a module of library/_shared/ (``composed_reference`` in _spec.py): the
file in the repository imports it; the Definition carries one self-contained text."""

from __future__ import annotations

import ast
import builtins
import importlib
from pathlib import Path
from typing import Any

import pytest
import torch

from kernelarena.library import load_library, operator_specs
from kernelarena.library._spec import composed_reference

SHARED = '''"""A helper (this docstring stays in the repository)."""

import math

import torch

SCALE = 2.0


def helper(x):
    return torch.tensor(math.pi) * x * SCALE
'''

OPERATOR = '''"""The op's reference."""

from __future__ import annotations

import math
from collections import OrderedDict

from kernelarena.library._shared.helper import helper


def run(x):
    return helper(x) + math.e + len(OrderedDict())
'''

COMPOSED = '''"""The op's reference."""

from __future__ import annotations
import math
import torch
from collections import OrderedDict


SCALE = 2.0


def helper(x):
    return torch.tensor(math.pi) * x * SCALE


def run(x):
    return helper(x) + math.e + len(OrderedDict())
'''


def _folder(tmp_path: Path, reference: str, shared: str = SHARED) -> tuple[Path, Path]:
    (tmp_path / "_shared").mkdir()
    (tmp_path / "_shared" / "helper.py").write_text(shared)
    (tmp_path / "op").mkdir()
    (tmp_path / "op" / "reference.py").write_text(reference)
    return tmp_path / "op" / "reference.py", tmp_path / "_shared"


def test_a_shared_module_is_inlined_imports_merged_and_its_body_first(tmp_path: Path) -> None:
    path, shared = _folder(tmp_path, OPERATOR)
    composed = composed_reference(path, shared)
    assert composed == COMPOSED
    namespace: dict[str, Any] = {}
    exec(compile(composed, "<composed>", "exec"), namespace)
    assert float(namespace["run"](torch.tensor(1.0))) == pytest.approx(2 * 3.14159265 + 2.7182818)


def test_a_reference_importing_no_shared_module_is_returned_as_it_is(tmp_path: Path) -> None:
    text = '"""Doc."""\n\nimport torch\n\n\ndef run(x):\n    return torch.neg(x)\n'
    path, shared = _folder(tmp_path, text)
    assert composed_reference(path, shared) == text


def test_an_unknown_shared_module_is_an_error_naming_the_file(tmp_path: Path) -> None:
    path, shared = _folder(tmp_path, OPERATOR.replace("_shared.helper", "_shared.missing"))
    message = r"reference\.py: imports kernelarena\.library\._shared\.missing, but .*missing\.py"
    with pytest.raises(ValueError, match=message + " does not exist"):
        composed_reference(path, shared)


@pytest.mark.parametrize(
    ("reference", "shared"),
    [
        (
            OPERATOR,
            SHARED.replace("import math\n", "from kernelarena.library._shared.x import y\n"),
        ),
        (OPERATOR.replace("import math\n", "from kernelarena import ops\n"), SHARED),
    ],
)
def test_any_other_kernelarena_import_is_an_error(
    tmp_path: Path, reference: str, shared: str
) -> None:
    path, folder = _folder(tmp_path, reference, shared)
    with pytest.raises(ValueError, match=r"reference\.py: its reference would import"):
        composed_reference(path, folder)


# -- the library's prefill references ------------------------------------------------------------


def _without_kernelarena(name: str, *args: Any, **kwargs: Any) -> Any:
    if name.split(".")[0] == "kernelarena":
        raise ImportError(f"a reference imported {name}")
    return builtins.__import__(name, *args, **kwargs)


def _inputs(operator: str, dtype: torch.dtype, causal: bool) -> tuple[Any, ...]:
    generator = torch.Generator().manual_seed(7)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator).to(dtype)

    if operator == "attention_prefill":  # seq_q > seq_kv: causal rows that see no key
        return randn(2, 4, 13, 16), randn(2, 2, 9, 16), randn(2, 2, 9, 16), 0.25, causal
    cu_seqlens_q = torch.tensor([0, 5, 5, 17], dtype=torch.int32)
    cu_seqlens_k = torch.tensor([0, 8, 11, 20], dtype=torch.int32)
    q, k, v = randn(17, 4, 16), randn(20, 2, 16), randn(20, 2, 16)
    return q, k, v, cu_seqlens_q, cu_seqlens_k, 0.25, causal


@pytest.mark.parametrize("operator", ["attention_prefill", "attention_prefill_varlen"])
def test_the_prefill_references_are_composed_and_self_contained(operator: str) -> None:
    """Each Definition carries the composed text; it imports no kernelarena, runs in a namespace
    where kernelarena cannot be imported, and computes what the repository's module does."""
    (spec,) = [s for s in operator_specs() if s.name == operator]
    text = composed_reference(spec.folder / spec.reference)
    for variant in ("bf16", "fp16"):
        assert load_library().definitions[f"{operator}_{variant}"].reference == text
    imported: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported == {"math", "torch"}
    assert text.count("def attend_heads(") == 1
    guarded = {**vars(builtins), "__import__": _without_kernelarena}
    namespace: dict[str, Any] = {"__builtins__": guarded}
    exec(compile(text, f"<reference of {operator}>", "exec"), namespace)
    module = importlib.import_module(f"kernelarena.library.{operator}.reference")
    for dtype in (torch.float32, torch.bfloat16):
        for causal in (False, True):
            want = module.run(*_inputs(operator, dtype, causal))
            got = namespace["run"](*_inputs(operator, dtype, causal))
            for g, w in zip(got, want, strict=True):
                assert g.dtype == w.dtype and torch.equal(g, w), (operator, dtype, causal)
            assert bool(want[1].isneginf().any()) == causal  # the causal cases mask rows out
