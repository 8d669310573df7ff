"""The judge, its sandboxes and the executors that bring it jobs: three wings around the protocol
between them (docs/architecture.md).

- ``sandbox/``: the solution's process and its confinement, what starts it (``sandboxes``, the
  zygote) and what it runs and times a call with; the judge and the executors stand on it.
- ``judge/``: the judge process (``judge.worker``) and everything that decides a verdict.
- ``executors/``: how jobs reach judges: the local executor, Ray, the runner, the build pool.
  They start a judge by its module path and speak to it only through the protocol (``messages``,
  a ``Job``'s payload and ``executors.jobs``' results), never importing the judge's modules.

Here, below the wings: ``options`` (a run's settings, a job, the trace made from it),
``messages`` (the tags on the executor-judge pipe) and ``process_output`` (what every engine
process does with its output). Old names of modules that moved into a wing stay aliases for one
release (``old_names``).
"""

from kernelarena.evaluate.old_names import install as _install_old_names

_install_old_names()
