"""The sandbox: the only process that runs solution code (``server``), its start (``sandboxes``,
``forked`` from the ``zygote``), its confinement (``isolation``'s walls, ``confine``, ``seccomp``,
``solution_caches``), the memory it shares with the judge (``arena``, ``descriptors``) and what
it runs and times a call with (``timing``, ``graph_timing``, ``stream_order``, the reference's
``reference_serving``). Imports no other wing of evaluate/.
"""
