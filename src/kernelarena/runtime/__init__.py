"""What evaluation and dispatch both need at run time, below both: a definition's reference and the
comparison of outputs with it (``verify``), whether a CUDA stream is being captured (``capture``).

Imports data/ and, for now, the comparison and input helpers of evaluate/ (``compare``,
``inputs.load_reference``), which move here when evaluate/ is reshaped (issue 38).
"""
