"""Deploying the winners: apply tables built from traces, the ``apply`` decorator, workload
tracing, ahead-of-time builds and generated operators. See docs/apply.md."""
