"""The judge: the worker process of one device (``worker``) and what decides a verdict there: the
job's evaluation (``evaluator``), the reference (``references``, ``reference_sandbox``), the
input sets and checks (``shared_sets``, ``pass_check``, ``verdicts``), the timing and its checks
against the judge's own clocks and the ceilings (``timing_check``, ``judge_clock``,
``crosscheck``, ``ceilings``). Stands on sandbox/; never imports executors/.
"""
