"""Workload: concrete axis values and where each input comes from."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Tag, field_validator

from kernelarena.data._base import (
    NonEmptyString,
    NonNegativeInt,
    Schema,
    Tagged,
    check_relative_path,
    content_hash,
)


class RandomInput(Tagged, Schema):
    type: Literal["random"] = "random"


class ScalarInput(Tagged, Schema):
    type: Literal["scalar"] = "scalar"
    value: bool | int | float


class SafetensorsInput(Tagged, Schema):
    """A tensor stored in a safetensors file, by a path relative to the dataset root."""

    type: Literal["safetensors"] = "safetensors"
    path: NonEmptyString
    tensor_key: NonEmptyString

    @field_validator("path")
    @classmethod
    def _relative(cls, path: str) -> str:
        return check_relative_path(path)


def _input_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "type" in value:
            return str(value["type"])
        # Files that omit unset fields: {} is random, {"value": ...} scalar, {"path": ...} safetensors.
        if "value" in value:
            return "scalar"
        return "safetensors" if "path" in value else "random"
    return str(getattr(value, "type", "random"))


InputSpec = Annotated[
    Annotated[RandomInput, Tag("random")]
    | Annotated[ScalarInput, Tag("scalar")]
    | Annotated[SafetensorsInput, Tag("safetensors")],
    Discriminator(_input_kind),
]


class Workload(Schema):
    """Ours, optional: ``tags`` (suites pick workloads by them: smoke, correctness, performance)
    and ``params`` (handed to the reference's ``make_inputs`` to shape random inputs)."""

    axes: dict[str, NonNegativeInt]
    inputs: dict[str, InputSpec]
    uuid: NonEmptyString
    tags: list[str] | None = None
    params: dict[str, Any] | None = None

    def content_hash(self) -> str:
        return content_hash(self.to_json_dict(), ignore=("tags",))
