"""How jobs reach judges: the jobs and their wire format (``jobs``), the runner that plans them
and keeps every trace (``runner``), the local executor with a worker process per device
(``local``, ``worker_process``), Ray (``ray_executor``, ``ray_actor``, ``ray_placement``,
``ray_wire``), and the build pool that compiles a run's solutions ahead (``build_pool``,
``build_process``). Stands on sandbox/; reaches a judge only by its module path and the
protocol, never by importing judge/.
"""
