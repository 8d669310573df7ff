"""Apply tables on disk: keyed by a digest of what built them, checked before they are trusted.

A table lives at ``<cache>/dispatch/<definition>/<hardware>[-gpu].json`` (``<cache>`` is
``$KERNELARENA_CACHE`` or ``~/.cache/kernelarena``; ``-gpu``: ranked by GPU time), one per figure
that ranks, so choosing between them costs nothing per call. The digest covers the rules'
version, the hardware and what apply knows of it (compute capability, SM count, bandwidth: they
decide whose traces it borrows), the ranking figure, today's content hashes of the definition,
its solutions and workloads, and every trace of the definition (the fields the rules read), so a
new trace, an edited solution or a changed rule gives a new digest. A file is used only when it parses, validates, carries today's
digest and its checksum matches its content; anything else is rebuilt and replaced atomically
under a file lock, so readers never see half a file.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path

from filelock import FileLock
from pydantic import ValidationError

from kernelarena.compile import cache_root
from kernelarena.data import Definition, Trace, TraceSet
from kernelarena.dispatch.borrow import sourced_timings
from kernelarena.dispatch.table import FORMAT, NEAR_BUCKETS, ApplyTable, RankBy, build_table
from kernelarena.runtime.hardware import HardwareProfile, profile_from_name

log = logging.getLogger("kernelarena.dispatch")


def tables_folder() -> Path:
    return cache_root().parent / "dispatch"


def table_path(definition: str, hardware: str, rank_by: RankBy = "eager") -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", hardware).strip("-").lower() or "hardware"
    exact = hashlib.sha256(hardware.encode()).hexdigest()[:8]  # two names, one slug: no clash
    suffix = "" if rank_by == "eager" else f"-{rank_by}"
    return tables_folder() / definition / f"{slug}-{exact}{suffix}.json"


def table_digest(
    definition: Definition,
    trace_set: TraceSet,
    profile: HardwareProfile,
    device_kind: str,
    rank_by: RankBy = "eager",
) -> str:
    solutions = sorted((s.name, s.content_hash()) for s in trace_set.solutions_for(definition.name))
    workloads = sorted((w.uuid, w.content_hash()) for w in trace_set.workloads_for(definition.name))
    traces = sorted(_fingerprint(t) for t in trace_set.traces.get(definition.name, []))
    known = [profile.name, profile.compute_capability, profile.sm_count, profile.copy_gbps]
    payload: list[object] = [FORMAT, NEAR_BUCKETS, known, device_kind, rank_by]
    payload += [definition.content_hash(), solutions, workloads, traces]
    canonical = json.dumps(payload, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _fingerprint(trace: Trace) -> str:
    evaluation = trace.evaluation
    performance = evaluation.performance if evaluation is not None else None
    environment = evaluation.environment if evaluation is not None else None
    hashes = trace.hashes
    return json.dumps(
        [
            trace.solution,
            trace.workload.uuid,
            sorted(trace.workload.axes.items()),
            None if hashes is None else [hashes.definition, hashes.solution, hashes.workload],
            None if evaluation is None else [evaluation.status.value, evaluation.timestamp],
            None
            if environment is None
            else [
                environment.hardware,
                (environment.ceilings or {}).get("copy_gbps"),
                getattr(environment, "compute_capability", None),
                getattr(environment, "sm_count", None),
            ],
            None
            if performance is None
            else [
                performance.latency_ms,
                performance.latency_p20_ms,
                performance.latency_p80_ms,
                performance.eager_call_ms,
                performance.host_submit_ms,
                getattr(performance, "compiles_while_timed", None),
            ],
        ],
        default=str,
    )


def checksum(table: ApplyTable) -> str:
    body = table.model_dump(mode="json", exclude={"checksum"})
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


def read_trusted(path: Path, digest: str) -> ApplyTable | None:
    """The table at ``path`` if it is whole, current and unaltered; else None (and why, logged)."""
    try:
        table = ApplyTable.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        return None
    except (OSError, ValidationError, ValueError) as error:
        log.warning("apply table %s is unreadable, rebuilding: %s", path, str(error)[:200])
        return None
    if table.format != FORMAT or table.digest != digest:
        log.info("apply table %s is stale, rebuilding", path)
        return None
    if table.checksum != checksum(table):
        log.warning("apply table %s does not match its checksum, rebuilding", path)
        return None
    return table


def write_table(path: Path, table: ApplyTable) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(table.model_dump_json(indent=1))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_or_build(
    definition: Definition,
    trace_set: TraceSet,
    hardware: str,
    device_kind: str,
    *,
    rank_by: RankBy = "eager",
    profile: HardwareProfile | None = None,
    use_cache: bool = True,
) -> ApplyTable:
    """The table for ``definition`` on ``hardware`` ranked by ``rank_by``, from the disk cache when
    it can be trusted. ``profile``: what is known of the hardware (default: what its name says),
    which decides whose traces it borrows when it has none."""
    profile = profile or profile_from_name(hardware)
    if profile.name != hardware:
        raise ValueError(f"profile of {profile.name!r} given for {hardware!r}")
    digest = table_digest(definition, trace_set, profile, device_kind, rank_by)
    path = table_path(definition.name, hardware, rank_by)
    if use_cache:
        table = read_trusted(path, digest)
        if table is not None:
            return table
    timings, borrowed_from = sourced_timings(definition, trace_set, profile, device_kind)
    table = build_table(definition, timings, hardware, digest, rank_by, borrowed_from)
    table.checksum = checksum(table)
    if use_cache:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(path) + ".lock", timeout=60):
                write_table(path, table)
        except OSError as error:  # a read-only cache never stops dispatch: the table is in memory
            log.warning("cannot write apply table %s: %s", path, error)
    return table
