"""Workload: concrete axis values and where each input comes from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from kernelarena.data._base import NonEmptyString, NonNegativeInt, Schema
from kernelarena.data.definition import _content_hash
from kernelarena.data.solution import check_relative_path


class RandomInput(Schema):
    type: Literal["random"] = "random"


class ScalarInput(Schema):
    type: Literal["scalar"] = "scalar"
    value: bool | int | float


class SafetensorsInput(Schema):
    """A tensor stored in a safetensors file, by a path relative to the dataset root."""

    type: Literal["safetensors"] = "safetensors"
    path: NonEmptyString
    tensor_key: NonEmptyString

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return check_relative_path(path)


InputSpec = Annotated[RandomInput | ScalarInput | SafetensorsInput, Field(discriminator="type")]


class Workload(Schema):
    """Ours, optional: ``tags`` (suites pick workloads by them: smoke, correctness, performance)
    and ``params`` (handed to the reference's ``make_inputs`` to shape random inputs)."""

    axes: dict[str, NonNegativeInt]
    inputs: dict[str, InputSpec]
    uuid: NonEmptyString
    tags: list[str] | None = None
    params: dict[str, Any] | None = None

    def content_hash(self) -> str:
        return _content_hash(self.to_json_dict(), ignore=("tags",))
