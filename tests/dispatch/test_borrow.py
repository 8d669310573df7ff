"""A GPU without traces borrows those of the nearest measured model of its architecture; one of
another architecture runs the fallback; own traces always win."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from kernelarena.cli import app
from kernelarena.dispatch import runtime as runtime_module
from kernelarena.dispatch.hardware import (
    COPY_FRACTION,
    HardwareProfile,
    donors,
    profile_from_name,
    recorded_profile,
)
from kernelarena.dispatch.runtime import ApplyRuntime
from kernelarena.dispatch.store import load_or_build
from kernelarena.library import load_library
from tests.dispatch.toys import add, marker, timed, toy_definition, toy_set, workload

# Made-up models: names no table knows, described the way torch describes a device.
# Nearer the H200 (about 4.2 TB/s measured) than the H100 (about 3.0 TB/s), both shipped.
MADE_UP_HOPPER = HardwareProfile("NVIDIA H1000 Made-Up", (9, 0), 132, 4300.0)
MADE_UP_BLACKWELL = HardwareProfile("NVIDIA B9000 Made-Up", (10, 0), 148, 7000.0)
H200 = "NVIDIA H200"

TOY = toy_definition()
ONE, TWO = marker(TOY, 1), marker(TOY, 2)
SMALL = workload(TOY, rows=4, cols=64)


def test_a_made_up_sm_90_gpu_borrows_the_h200_traces_shipped_with_the_library() -> None:
    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    own = load_or_build(definition, library, H200, "cuda")
    borrowed = load_or_build(
        definition, library, MADE_UP_HOPPER.name, "cuda", profile=MADE_UP_HOPPER
    )
    assert own.entries and own.borrowed_from is None
    assert borrowed.borrowed_from == H200 and borrowed.hardware == MADE_UP_HOPPER.name
    assert [(e.key, e.winner) for e in borrowed.entries] == [(e.key, e.winner) for e in own.entries]
    assert borrowed.choose((4096, 4096)).solutions == own.choose((4096, 4096)).solutions


def test_a_gpu_of_another_architecture_gets_the_fallback() -> None:
    library = load_library()
    definition = library.definitions["rmsnorm_bf16"]
    table = load_or_build(
        definition, library, MADE_UP_BLACKWELL.name, "cuda", profile=MADE_UP_BLACKWELL
    )
    assert table.entries == [] and table.borrowed_from is None
    assert table.choose((4096, 4096)).reason == "fallback"
    unknown = load_or_build(definition, library, "Some Accelerator 1", "cuda")
    assert unknown.entries == []  # an unknown architecture borrows nothing


def test_own_traces_win_over_borrowed_ones_even_when_fewer() -> None:
    large = workload(TOY, rows=4096, cols=4096)
    trace_set = toy_set(TOY, solutions=[ONE, TWO])
    add(
        trace_set,
        timed(TOY, ONE, SMALL, 1.0, hardware=H200),
        timed(TOY, TWO, SMALL, 9.0, hardware=H200),
        timed(TOY, TWO, large, 9.0, hardware=H200),
        timed(TOY, ONE, SMALL, 9.0, hardware=MADE_UP_HOPPER.name),
        timed(TOY, TWO, SMALL, 1.0, hardware=MADE_UP_HOPPER.name),
    )
    table = load_or_build(TOY, trace_set, MADE_UP_HOPPER.name, "cuda", profile=MADE_UP_HOPPER)
    assert table.borrowed_from is None
    assert [(e.key, e.winner) for e in table.entries] == [((4, 64), TWO.name)]


def test_the_nearest_donor_shares_the_compute_capability_then_bandwidth_and_sms() -> None:
    sxm = recorded_profile("NVIDIA H100 80GB HBM3", [])
    h200 = HardwareProfile(H200, (9, 0), 132, 4230.0)
    nvl = profile_from_name("NVIDIA H100 NVL")  # 3900 GB/s on its datasheet
    assert nvl.copy_gbps == pytest.approx(3900 * COPY_FRACTION)
    assert [d.name for d in donors(nvl, [h200, sxm])] == [sxm.name, H200]
    fast = HardwareProfile("NVIDIA H1000 Made-Up", (9, 0), 132, 4300.0)
    assert [d.name for d in donors(fast, [sxm, h200])] == [H200, sxm.name]
    # an equal compute capability comes before a nearer bandwidth: an A10G borrows from an A10
    a10g = profile_from_name("NVIDIA A10G")
    a100, a10 = profile_from_name("NVIDIA A100-SXM4-80GB"), profile_from_name("NVIDIA A10")
    assert [d.name for d in donors(a10g, [a100, a10])] == [a10.name, a100.name]
    assert donors(MADE_UP_BLACKWELL, [sxm, h200, a100]) == []
    assert donors(profile_from_name("NVIDIA L4"), [a100, a10]) == []  # Ada is not Ampere


def test_recorded_bandwidth_decides_among_measured_models() -> None:
    trace_set = toy_set(TOY, solutions=[ONE, TWO])
    add(
        trace_set,
        timed(TOY, ONE, SMALL, 1.0, hardware="NVIDIA Hopper Slow", copy_gbps=2000.0),
        timed(TOY, TWO, SMALL, 9.0, hardware="NVIDIA Hopper Slow", copy_gbps=2000.0),
        timed(TOY, ONE, SMALL, 9.0, hardware="NVIDIA Hopper Fast", copy_gbps=4000.0),
        timed(TOY, TWO, SMALL, 1.0, hardware="NVIDIA Hopper Fast", copy_gbps=4000.0),
    )
    # Names no table knows: their compute capability is read from the environments, where an
    # evaluator that records it writes it.
    for trace in trace_set.traces[TOY.name]:
        assert trace.evaluation is not None
        setattr(trace.evaluation.environment, "compute_capability", "9.0")  # noqa: B010
    near_fast = HardwareProfile("NVIDIA H1000 Made-Up", (9, 0), None, 3800.0)
    table = load_or_build(TOY, trace_set, near_fast.name, "cuda", profile=near_fast)
    assert (table.borrowed_from, table.entries[0].winner) == ("NVIDIA Hopper Fast", TWO.name)
    near_slow = HardwareProfile("NVIDIA H1000 Made-Up", (9, 0), None, 2100.0)
    table = load_or_build(TOY, trace_set, near_slow.name, "cuda", profile=near_slow)
    assert (table.borrowed_from, table.entries[0].winner) == ("NVIDIA Hopper Slow", ONE.name)


def test_the_runtime_borrows_for_a_made_up_sm_90_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runtime_module, "describe_device", lambda device: MADE_UP_HOPPER)
    library = load_library()
    runtime = ApplyRuntime(library)
    table = runtime.table(library.definitions["rmsnorm_bf16"], torch.device("cuda:0"))
    assert table.borrowed_from == H200 and runtime.hardware(torch.device("cuda:0")) == (
        MADE_UP_HOPPER.name
    )
    monkeypatch.setattr(runtime_module, "describe_device", lambda device: MADE_UP_BLACKWELL)
    other = ApplyRuntime(library).table(library.definitions["rmsnorm_bf16"], torch.device("cuda:0"))
    assert other.entries == [] and other.choose((128, 4096)).reason == "fallback"


def test_dispatch_show_says_whose_traces_decide(tmp_path: Path) -> None:
    runner = CliRunner()
    dataset = ["--dataset", str(tmp_path)]
    own = runner.invoke(
        app, ["dispatch", "show", "rmsnorm_bf16", "--hardware", "NVIDIA H100 80GB HBM3", *dataset]
    )
    assert own.exit_code == 0, own.output
    assert "borrowed" not in own.output  # the H100's own traces ship with the library
    nvl = runner.invoke(
        app, ["dispatch", "show", "rmsnorm_bf16", "--hardware", "NVIDIA H100 NVL", *dataset]
    )
    assert nvl.exit_code == 0, nvl.output
    assert "borrowed from NVIDIA H100 80GB HBM3" in " ".join(nvl.output.split())
    blackwell = runner.invoke(
        app, ["dispatch", "show", "rmsnorm_bf16", "--hardware", "NVIDIA B200", *dataset]
    )
    assert blackwell.exit_code == 0, blackwell.output
    assert "every call runs the fallback" in " ".join(blackwell.output.split())
