"""Solution: one implementation of a Definition, with its sources and how to build and call it."""

from __future__ import annotations

from enum import Enum

from pydantic import Field, field_validator, model_validator

from kernelarena.data._base import (
    NonEmptyString,
    PathComponent,
    Schema,
    check_relative_path,
    content_hash,
)


class Language(str, Enum):
    PYTHON = "python"
    TRITON = "triton"
    CPP = "cpp"
    CUDA = "cuda"
    TILELANG = "tilelang"
    # Ours, not FlashInfer-Trace's: Python sources in NVIDIA's CuTe DSL (nvidia-cutlass-dsl).
    # FlashInfer-Bench 0.1.2 rejects a language it does not know, so export leaves these out.
    CUTE_DSL = "cute_dsl"


# The languages FlashInfer-Bench's schema (0.1.2) accepts; the others are kernelarena's own.
FLASHINFER_LANGUAGES = frozenset(
    {Language.PYTHON, Language.TRITON, Language.CPP, Language.CUDA, Language.TILELANG}
)


class SourceFile(Schema):
    path: NonEmptyString
    content: NonEmptyString

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return check_relative_path(path)


class BuildSpec(Schema):
    language: Language
    target_hardware: list[str] = Field(min_length=1)
    entry_point: NonEmptyString
    dependencies: list[NonEmptyString] = Field(default_factory=list)
    destination_passing_style: bool = True
    binding: str | None = None

    @field_validator("entry_point")
    @classmethod
    def _entry_format(cls, entry: str) -> str:
        if entry.count("::") != 1 or not all(entry.split("::")):
            raise ValueError(f"'{entry}' is not of the form 'file::function'")
        return entry

    @property
    def entry_file(self) -> str:
        return self.entry_point.split("::")[0]

    @property
    def entry_symbol(self) -> str:
        return self.entry_point.split("::")[1]


class Solution(Schema):
    name: PathComponent
    definition: PathComponent
    author: NonEmptyString
    spec: BuildSpec
    sources: list[SourceFile] = Field(min_length=1)
    description: str | None = None

    @model_validator(mode="after")
    def _sources_consistent(self) -> Solution:
        paths = [s.path for s in self.sources]
        duplicates = sorted({p for p in paths if paths.count(p) > 1})
        if duplicates:
            raise ValueError(f"sources: duplicate paths {duplicates}")
        if self.spec.entry_file not in paths:
            raise ValueError(
                f"spec.entry_point: file '{self.spec.entry_file}' is not among the sources {paths}"
            )
        return self

    def source(self, path: str) -> SourceFile:
        return next(s for s in self.sources if s.path == path)

    def content_hash(self) -> str:
        return content_hash(self.to_json_dict(), ignore=("description", "author"))

    def runs_on(self, hardware: str) -> bool:
        """Whether ``hardware`` ('cpu', 'cuda', or a GPU architecture like 'sm_90') is a target."""
        targets = {t.lower() for t in self.spec.target_hardware}
        if hardware == "cpu":
            return "cpu" in targets
        return bool(targets - {"cpu"}) or "gpu" in targets
