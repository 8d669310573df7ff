"""Issue 42's languages at the edges: builders by language (tilelang, cute_dsl) and what they say
when their package is missing; `list` shows each definition's solution languages; `export` leaves
our own language (cute_dsl) out of a FlashInfer-Bench dataset with a warning, and the rest loads
in FlashInfer-Bench's reader."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.compile import DependencyMissing, builder_for
from kernelarena.compile.cute_dsl import CuteDslBuilder
from kernelarena.compile.tilelang import TileLangBuilder
from kernelarena.data import FLASHINFER_LANGUAGES, Language, TraceSet
from tests.evaluate.bad_solutions import DEFINITION, solution, trace_set

runner = CliRunner()


def _in_language(language: str, name: str):
    base = solution("good", True, name=name)
    return base.model_copy(
        update={"spec": base.spec.model_copy(update={"language": Language(language)})}
    )


def test_builders_by_language():
    assert isinstance(builder_for(_in_language("tilelang", "t")), TileLangBuilder)
    assert isinstance(builder_for(_in_language("cute_dsl", "c")), CuteDslBuilder)
    assert Language.CUTE_DSL not in FLASHINFER_LANGUAGES
    assert Language.TILELANG in FLASHINFER_LANGUAGES


def test_cute_dsl_without_its_package_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n == "cutlass" else real(n, *a)
    )
    with pytest.raises(DependencyMissing, match=r"kernelarena\[cute-dsl\]"):
        CuteDslBuilder().build(DEFINITION, _in_language("cute_dsl", "c"), "cpu")


def _dataset(root: Path) -> TraceSet:
    made = trace_set({}, root=root)
    made.add_solution(_in_language("cute_dsl", "vector_scale_cute_dsl"))
    made.add_solution(_in_language("tilelang", "vector_scale_tilelang"))
    made.save(root)
    return made


def test_list_shows_the_languages(tmp_path: Path):
    _dataset(tmp_path / "dataset")
    result = runner.invoke(app, ["list", "--dataset", str(tmp_path / "dataset")])
    assert result.exit_code == 0, result.output
    assert "languages" in result.output
    assert "cute_dsl:1 python:1 tilelang:1" in result.output


def test_export_leaves_cute_dsl_out_with_a_warning(tmp_path: Path):
    _dataset(tmp_path / "dataset")
    out = tmp_path / "out"
    result = runner.invoke(app, ["export", str(out), "--dataset", str(tmp_path / "dataset")])
    assert result.exit_code == 0, result.output
    assert "left out vector_scale_cute_dsl: language 'cute_dsl'" in result.output
    exported = TraceSet.load(out, strict=True)
    assert "vector_scale_cute_dsl" not in exported.solutions
    assert {"vector_scale_tilelang", "vector_scale_good_first"} <= set(exported.solutions)
    peer = pytest.importorskip("flashinfer_bench.data")
    theirs = peer.TraceSet.from_path(str(out))
    names = {s.name for ss in theirs.solutions.values() for s in ss}
    assert "vector_scale_tilelang" in names and "vector_scale_cute_dsl" not in names
