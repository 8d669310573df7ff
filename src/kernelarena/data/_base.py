"""What the schema modules share, below all of them: the base class of every schema (unknown
fields survive a load and a save), checks of names and paths, the content hash, and the tensor
spec that definitions and their constraints both read."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from kernelarena.data.dtypes import DType

NonEmptyString = Annotated[str, Field(min_length=1)]


def check_path_component(name: str) -> str:
    """A name the dataset layout makes into one file or folder name (``op_type``, a definition's
    or solution's name): one component, so that what a dataset file says cannot place a write
    elsewhere (``/etc``, ``../..``)."""
    if "\0" in name:
        raise ValueError(f"{name!r} holds a NUL character; names are single file names")
    if name.startswith(("/", "\\")):
        raise ValueError(f"'{name}' is an absolute path; names are single file names")
    if "/" in name or "\\" in name:
        raise ValueError(f"'{name}' holds a path separator; names are single file names")
    if name in (".", ".."):
        raise ValueError(f"'{name}' names a folder, not a file; names are single file names")
    return name


# A name that becomes one file or folder name in a dataset folder.
PathComponent = Annotated[str, Field(min_length=1), AfterValidator(check_path_component)]
NonNegativeInt = Annotated[int, Field(ge=0)]


class Tagged(BaseModel):
    """Mixin for models told apart by a ``type`` field: it is always written, even when defaulted."""

    def model_post_init(self, context: Any, /) -> None:
        self.model_fields_set.add("type")


class Schema(BaseModel):
    """Keeps fields it does not know (FlashInfer-Trace files from newer tools), writes only what was set.

    ``exclude_unset`` on dump matches how FlashInfer-Bench writes its files: a default that was never
    written is never invented, so a file loaded and saved comes back byte-for-byte in content.
    """

    model_config = ConfigDict(extra="allow", populate_by_name=True, ser_json_inf_nan="strings")

    def to_json_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_unset=True, by_alias=True)

    def to_json(self, indent: int | None = None) -> str:
        return self.model_dump_json(exclude_unset=True, by_alias=True, indent=indent)


def content_hash(payload: dict[str, Any], ignore: Sequence[str] = ()) -> str:
    """The hash that traces record for provenance: canonical JSON of ``payload`` less ``ignore``."""
    kept = {k: v for k, v in payload.items() if k not in ignore}
    canonical = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:32]


def check_relative_path(path: str) -> str:
    """A path inside a dataset or build folder: relative and never climbing out."""
    pure = PurePosixPath(path.replace("\\", "/"))
    if pure.is_absolute() or path.startswith(("/", "\\")) or (len(path) > 1 and path[1] == ":"):
        raise ValueError(f"'{path}' is absolute; paths must be relative")
    if ".." in pure.parts:
        raise ValueError(f"'{path}' climbs out of its folder with '..'")
    return path


class TensorSpec(Schema):
    shape: list[NonEmptyString] | None
    dtype: DType
    description: str | None = None
    aliases: str | None = None
