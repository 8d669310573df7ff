"""The sandbox process: the only place solution code runs, and nothing of the verdict lives here.

A judge (``kernelarena.evaluate.judge``) starts one sandbox per solution. The sandbox confines itself
(``confine``), imports torch, and then builds and calls exactly one solution on tensors the judge
shares with it (``arena``). It answers each request with one JSON message: what a call returned (types,
dtypes, shapes), the samples of its own timers, an error's traceback. The judge treats all of it as
claims to check. Requests come pickled from the judge, the trusted side; answers go back as bounded
JSON, which the judge parses without executing anything. Whatever the solution patches here (the
compare function, torch, the timers, this module) changes only what this process claims.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from kernelarena.evaluate.sandbox.solution_calls import SolutionCalls, on_device
from kernelarena.evaluate.sandbox.triton_warmth import may_use_triton, warm_triton

REPLY_LIMIT = 1 << 20


@dataclass
class _Bound:
    arguments: list[Any]
    outputs: list[Any]  # the destinations of the non-aliased outputs, in the definition's order
    slots: list[int] = field(default_factory=list)  # for each returned value: its destination


# Requests whose calls someone may time: the sandbox (probe, time), the judge (eager, replay).
_TIMED = frozenset({"probe", "time", "eager", "replay"})


class Sandbox(SolutionCalls):
    def __init__(
        self, conn: Connection, device: Any, writable: Sequence[str] = (), confined: bool = False
    ) -> None:
        import torch

        self.torch = torch
        self.conn = conn
        self.device = device
        self.on_gpu = device.type == "cuda"
        self.runnable: Any = None
        self.sets: dict[int, _Bound] = {}
        self.chunks: dict[int, Any] = {}
        self.graph: Any = None
        self.graph_calls = 0
        self.graph_sets: list[int] = []  # the sets the graph's calls rotate over
        self.graph_results: list[Any] = []  # a value-returning solution's results, one per set
        # A judge's first sandboxes warm Triton beside their first job's build and checks
        # (``triton_warmth.warm_triton``), if that job's solution may use Triton, until a timed request.
        self.warm_pending = False
        self.warming: threading.Thread | None = None
        self.writable, self.confined = list(writable), confined
        self.namespace: str | None = None  # the solution's caches (``solution_caches``)
        if not self.on_gpu:
            # CPU timings check, they rank nothing: one thread, so that the solution's calls do
            # not fight the judge's own threads for a machine's few cores.
            torch.set_num_threads(1)
        self.caches = ""  # where they are and what confines them, for the build's reply
        self.reference: Any = None  # a ``reference_serving.ReferenceServer``, if it serves one

    def serve(self) -> None:
        while True:
            try:
                request = self.conn.recv()
            except (EOFError, OSError):
                return
            operation, arguments = request[0], request[1:]
            if operation == "stop":
                return
            if self.warm_pending and operation == "build":
                self.warm_pending = False
                if may_use_triton(arguments[1]):
                    self.warming = threading.Thread(
                        target=warm_triton, name="warm-triton", daemon=True
                    )
                    self.warming.start()
            if operation in _TIMED and self.warming is not None:
                # A thread beside a timed call could delay its launches.
                self.warming.join()
                self.warming = None
            try:
                # A sandbox that serves a reference answers the reference's requests only.
                served = self if self.reference is None else self.reference
                prefix = "_" if self.reference is None else ""
                reply = getattr(served, prefix + operation)(*arguments)
            except BaseException as error:  # SystemExit too: the solution's, not ours
                reply = self._failure(error)
            self._send(reply)

    def _send(self, reply: dict[str, Any]) -> None:
        data = json.dumps(reply, default=str).encode()
        if len(data) > REPLY_LIMIT:
            data = json.dumps({"error": "reply too long", "kind": "runtime"}).encode()
        self.conn.send_bytes(data)

    def _failure(self, error: BaseException) -> dict[str, Any]:
        text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        name = type(error).__name__
        kind = "runtime"
        if isinstance(error, NotImplementedError):
            kind = "unsupported"
        elif "CompilationError" in name or "CompileTimeAssertionFailure" in name:
            kind = "compile"
        elif "out of memory" in str(error).lower():
            kind = "oom"
        return {"error": text[-6000:], "kind": kind, "healthy": self._healthy()}

    def _healthy(self) -> bool:
        from kernelarena.evaluate.sandbox.timing import device_healthy

        return not self.on_gpu or device_healthy(self.device)

    def _sync(self) -> None:
        if self.on_gpu:
            self.torch.cuda.synchronize(self.device)

    # -- requests -------------------------------------------------------------------------------

    def _build(
        self,
        definition_json: dict[str, Any],
        solution_json: dict[str, Any],
        namespace: str | None = None,
    ) -> Any:
        from kernelarena.compile import BuildError, DependencyMissing, build_solution
        from kernelarena.data import Definition, Solution

        if self.reference is not None:
            raise RuntimeError("this sandbox serves a definition's reference, not a solution")
        if namespace is not None and namespace != self.namespace:
            # Before any of the solution's code is built or imported.
            if self.namespace is not None:
                raise RuntimeError(f"this sandbox serves caches {self.namespace}, not {namespace}")
            from kernelarena.evaluate.sandbox import solution_caches

            self.caches = solution_caches.enter(namespace, self.writable, self.confined)
            self.namespace = namespace
        definition = Definition.model_validate(definition_json)
        solution = Solution.model_validate(solution_json)
        try:
            self.runnable = build_solution(definition, solution, str(self.device))
        except DependencyMissing as error:
            return {"skipped": str(error)}
        except BuildError as error:
            return {"build_error": str(error)[-8000:]}
        metadata = {k: str(v) for k, v in self.runnable.metadata.items()}
        metadata["artifact"] = str(self.runnable.artifact or "")
        if self.caches:
            metadata["caches"] = self.caches
        return {"ok": True, "dps": self.runnable.destination_passing_style, "metadata": metadata}

    def _reference(self, definition_json: dict[str, Any], threads: int) -> dict[str, Any]:
        """Serve the definition's reference from now on, never a solution
        (``reference_serving``)."""
        from kernelarena.evaluate.sandbox.reference_serving import serve_reference

        if self.runnable is not None or self.namespace is not None or self.reference is not None:
            raise RuntimeError("this sandbox already serves a solution or a reference")
        self.namespace = "reference"
        self.reference, reply = serve_reference(self, definition_json, threads)
        return reply

    def _bind(
        self, new_buffers: dict[int, tuple[str, int, bool, bytes]], bindings: list[tuple[Any, ...]]
    ) -> dict[str, Any]:
        """Sets the judge carved from its arena: (id, layout, arguments, input count, slots) each,
        in buffers mapped before or described in ``new_buffers`` (their descriptors follow the
        request). A large set's own buffer lives as long as the set's tensors."""
        from kernelarena.evaluate.sandbox.arena import open_buffers, view_layout
        from kernelarena.evaluate.sandbox.descriptors import receive_fds

        count = sum(1 for kind, _, _, _ in new_buffers.values() if kind != "cuda_ipc")
        fds = receive_fds(self.conn, count) if count else []
        opened = open_buffers(self.device, new_buffers, fds)
        self.chunks.update({i: buffer for i, (buffer, kept) in opened.items() if kept})
        buffers = {**self.chunks, **{i: buffer for i, (buffer, _) in opened.items()}}
        for set_id, layout, arguments, input_count, slots in bindings:
            tensors = view_layout(buffers, layout)
            values = [tensors[item] if kind == "tensor" else item for kind, item in arguments]
            self.sets[set_id] = _Bound(values, tensors[input_count:], slots)
        return {"ok": True}

    def _forget(self, set_ids: list[int]) -> dict[str, Any]:
        from kernelarena.evaluate.sandbox.arena import release_unused

        for set_id in set_ids:
            self.sets.pop(set_id, None)
        self.graph, self.graph_sets, self.graph_results = None, [], []
        release_unused(self.device)
        return {"ok": True}

    def _arguments(self, bound: _Bound) -> list[Any]:
        if self.runnable.destination_passing_style:
            return bound.arguments + bound.outputs
        return bound.arguments

    def _calls(self, set_ids: list[int]) -> tuple[Any, list[Any]]:
        """``fn(i)``, a call on set ``set_ids[i % len(set_ids)]``, and the list holding each set's
        last result (``graph_timing.held_per_set``). The one way every request calls the
        solution, checked or timed alike: nothing in how it is called tells the two apart, and
        the judge checks the outputs of every pass (``pass_check``)."""
        from kernelarena.evaluate.sandbox.graph_timing import held_per_set

        bound = [self._arguments(self.sets[i]) for i in set_ids]
        runnable = self.runnable
        return held_per_set(lambda i: runnable(*bound[i % len(bound)]), len(bound))

    def _delivered(self, set_ids: list[int], results: list[Any]) -> list[Any] | None:
        """A value-returning solution's last result on each set copied into the judge's buffers of
        that set, and what each was (``_deliver``); None for a destination-passing solution."""
        if self.runnable.destination_passing_style:
            return None
        described = [
            self._deliver(self.sets[set_id], result) if result is not None else None
            for set_id, result in zip(set_ids, results, strict=False)
        ]
        self._sync()
        return described

    def _deliver(self, bound: _Bound, result: Any) -> list[dict[str, Any]]:
        """Describe a value-returning call's results and copy those that fit into the judge's
        destinations, where the judge compares them. Only a plain ``torch.Tensor`` on this
        device counts as a result: a subclass or a lazy value could do its work when it is read,
        after the timed calls."""
        torch = self.torch
        values = list(result) if isinstance(result, tuple | list) else [result]
        described: list[dict[str, Any]] = []
        for index, value in enumerate(values):
            if type(value) is not torch.Tensor:
                kind = "Tensor subclass " if isinstance(value, torch.Tensor) else ""
                described.append({"type": kind + type(value).__name__})
                continue
            if not on_device(value.device, self.device):
                described.append({"type": f"Tensor on {value.device}"})
                continue
            described.append(
                {"type": "Tensor", "dtype": str(value.dtype), "shape": list(value.shape)}
            )
            slot = bound.slots[index] if index < len(bound.slots) else -1
            if slot >= 0:
                target = bound.outputs[slot]
                if target.dtype == value.dtype and target.shape == value.shape:
                    target.copy_(value)
        return described


def main(argv: list[str]) -> None:
    fd, device_name, first, writable = int(argv[0]), argv[1], argv[2] == "first", argv[3:]
    from kernelarena.evaluate.process_output import line_buffered_output, make_cuda_context
    from kernelarena.evaluate.sandbox.confine import confine_sandbox, die_with_parent

    line_buffered_output()  # the judge made descriptors 1 and 2 this sandbox's log
    die_with_parent()
    context = threading.Thread(target=make_cuda_context, args=(device_name,), name="cuda-context")
    if not device_name.startswith("cuda"):
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    else:  # the first sandbox is what the first job waits for: its context beside torch's import
        context.start()
    conn = Connection(fd)
    import torch

    device = torch.device(device_name)
    if device.type == "cuda":
        # Before the confinement: the driver's initialisation fails under Landlock (error 304).
        torch.cuda.set_device(device)
        torch.cuda.synchronize(device)
        context.join()
    unconfined = os.environ.get("KERNELARENA_UNCONFINED") == "1"
    confinement = "" if unconfined else confine_sandbox(writable)
    serve(conn, device_name, writable, confinement, first)


def serve(
    conn: Connection, device_name: str, writable: list[str], confinement: str, first: bool = False
) -> None:
    """Serve one solution's requests on ``conn`` until the judge stops it, then exit: the rest of
    a sandbox's start once it is confined (``confinement`` says how), whether it was started as
    a program (``main``) or forked (``zygote``)."""
    import torch

    device = torch.device(device_name)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    import kernelarena.compile  # noqa: F401  (its imports, before the first request waits on them)

    sandbox = Sandbox(conn, device, writable, confined="Landlock ABI" in confinement)
    if device.type != "cuda":
        with contextlib.suppress(ImportError):
            import triton  # noqa: F401  (as warm_triton says; the interpreter has no cache key)
    elif first:
        sandbox.warm_pending = True
    else:
        warm_triton()
    print(f"kernelarena sandbox on {device_name}: {confinement or 'not confined'}", flush=True)
    ready = {"ready": True, "confinement": confinement, "pid": os.getpid()}
    conn.send_bytes(json.dumps(ready).encode())
    sandbox.serve()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
