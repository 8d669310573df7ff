"""The schemas (FlashInfer-Trace compatible) and the dataset folder."""

from kernelarena.data.dataset import DatasetError, Problem, TraceSet
from kernelarena.data.definition import (
    AxisConst,
    AxisError,
    AxisVar,
    Definition,
    TensorSpec,
    Tolerance,
)
from kernelarena.data.dtypes import DType
from kernelarena.data.solution import (
    FLASHINFER_LANGUAGES,
    BuildSpec,
    Language,
    Solution,
    SourceFile,
)
from kernelarena.data.trace import (
    Correctness,
    Environment,
    Evaluation,
    Performance,
    Status,
    Trace,
    TraceHashes,
)
from kernelarena.data.workload import RandomInput, SafetensorsInput, ScalarInput, Workload

__all__ = [
    "FLASHINFER_LANGUAGES",
    "AxisConst",
    "AxisError",
    "AxisVar",
    "BuildSpec",
    "Correctness",
    "DType",
    "DatasetError",
    "Definition",
    "Environment",
    "Evaluation",
    "Language",
    "Performance",
    "Problem",
    "RandomInput",
    "SafetensorsInput",
    "ScalarInput",
    "Solution",
    "SourceFile",
    "Status",
    "TensorSpec",
    "Tolerance",
    "Trace",
    "TraceHashes",
    "TraceSet",
    "Workload",
]
