"""``kernelarena doctor``: which protections a solution's sandbox gets on this machine, where
definitions' references run, and which hot path ``@kernelarena.apply`` runs here."""

from __future__ import annotations

import os

from kernelarena.cli.common import app, console


@app.command()
def doctor() -> None:
    """Start a process confined as a sandbox is and say which protections held, which did not
    and why (namespaces, file-system view, capabilities, Landlock, seccomp, resource limits);
    then whether apply's hot path is compiled here (and if not, why)."""
    from kernelarena.evaluate.options import where_references_run
    from kernelarena.evaluate.sandbox.confine import landlock_abi
    from kernelarena.evaluate.sandbox.isolation import find_bwrap, trial, walls

    found = walls()
    user = "root" if os.geteuid() == 0 else f"uid {os.geteuid()}"
    console.print(f"running as {user}")
    console.print(f"bwrap: {find_bwrap() or 'not found'}")
    if found.available:
        console.print("namespaces: yes (user, pid, net, ipc, uts; a minimal file-system view)")
    else:
        console.print(f"namespaces: NO, {found.why_not}")
    abi = landlock_abi()
    console.print(f"Landlock: ABI {abi}" if abi else "Landlock: NO (not in this kernel)")
    where, confinement = trial()
    console.print(f"a sandbox started now ({where or 'did not start'}):")
    console.print(f"  {confinement}", markup=False)
    console.print(f"CPU sandboxes: {_cpu_sandboxes()}", markup=False)
    from kernelarena.dispatch import fastcall, tensorcheck

    console.print(f"apply fast path: {fastcall.status()}", markup=False)
    console.print(f"apply tensor guard: {tensorcheck.status()}", markup=False)
    console.print(f"definitions' references: {where_references_run()}", markup=False)


def _cpu_sandboxes() -> str:
    """How a CPU sandbox starts here: forked from the zygote, or as a program and why."""
    import tempfile
    from pathlib import Path

    from kernelarena.evaluate.sandbox.forked import ForkedProcess
    from kernelarena.evaluate.sandbox.isolation import walls
    from kernelarena.evaluate.sandbox.sandboxes import SandboxDied, Sandboxes

    with tempfile.TemporaryDirectory(prefix="kernelarena-doctor-") as folder:
        sandboxes = Sandboxes("cpu", Path(folder), [])
        try:
            sandbox = sandboxes.for_solution("doctor")
        except SandboxDied as died:
            return f"did not start: {died}"
        finally:
            sandboxes.close()
        if isinstance(sandbox.process, ForkedProcess):
            return "forked from a zygote (each in PID and mount namespaces of its own)"
    if os.environ.get("KERNELARENA_ZYGOTE") == "0":
        return "started as programs (KERNELARENA_ZYGOTE=0)"
    if not walls().available:
        return "started as programs (no namespaces here)"
    return "started as programs: a fork's walls failed (the line above says why)"
