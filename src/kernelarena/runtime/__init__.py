"""What evaluation and dispatch both need at run time, below both: a workload's inputs
(``inputs``), the comparison of outputs (``compare``), a definition's reference and the check of a
solution against it (``verify``), the hardware a process runs on (``hardware``), which definitions
a name chooses (``names``), whether a CUDA stream is being captured (``capture``).

Imports data/ only (docs/architecture.md: the order of the packages).
"""
