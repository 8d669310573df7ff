"""``python -m kernelarena.evaluate.sandbox``, the sandbox's command before it had a wing of its
own: starts a sandbox as ``python -m kernelarena.evaluate.sandbox.server`` does."""

import runpy

runpy.run_module("kernelarena.evaluate.sandbox.server", run_name="__main__", alter_sys=True)
