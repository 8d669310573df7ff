"""``kernelarena doctor``: which protections a solution's sandbox gets on this machine."""

from __future__ import annotations

import os

from kernelarena.cli.common import app, console


@app.command()
def doctor() -> None:
    """Start a process confined as a sandbox is and say which protections held, which did not
    and why (namespaces, file-system view, capabilities, Landlock, seccomp, resource limits)."""
    from kernelarena.evaluate.confine import landlock_abi
    from kernelarena.evaluate.isolation import find_bwrap, trial, walls

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
