"""The ``kernelarena`` command: thin, it calls the stages (data, evaluate, dispatch, report).

The stages are imported inside the commands: ``run`` starts its workers (seconds to import torch)
before this process builds the schemas (kernelarena.data, 0.25 s) and loads the datasets. One
module per group of commands; each registers its commands on ``app`` when imported.
"""

from __future__ import annotations

from kernelarena.evaluate.sandbox.bytecode import keep_bytecode_here

keep_bytecode_here()  # before the imports below, which it speeds up where no bytecode is kept

from kernelarena.cli import datasets, dispatch, doctor, report, run, tune  # noqa: E402, F401
from kernelarena.cli.common import app  # noqa: E402
from kernelarena.cli.selection import dataset_selection  # noqa: E402

__all__ = ["app", "dataset_selection", "main"]


def main() -> None:
    app()
