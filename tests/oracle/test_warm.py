"""The judging's kernels are loaded beside the worker's first run: once an audit, for the
problem's result dtypes, never beside a run that measures the device, and a warm-up that fails
changes nothing an audit reports."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import torch

from kernelaudit.device_copies import DEVICE_COPIES
from kernelaudit.engine import executor
from kernelaudit.engine.audit import audit
from kernelaudit.oracle import warm
from kernelaudit.problem.spec import Output, Problem, TensorInput
from kernelaudit.runner.auditor import process


def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


PROBLEM = Problem(
    name="doubled",
    reference=doubled,
    axes=("rows", "cols"),
    inputs=(TensorInput("x", ("rows", "cols"), torch.float32),),
    outputs=(Output("y", ("rows", "cols"), "x"),),
    workloads=({"rows": 64, "cols": 256},),
)

_GPU = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_an_audit_warms_the_judging_once_beside_an_unmeasured_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "candidates.py").write_text("def doubled(x):\n    return x * 2\n")
    problem = PROBLEM
    events: list[object] = []
    run, prepare = process.Worker.run, executor.Executor.prepare

    def running(self, invocation, *args, **kwargs):  # type: ignore[no-untyped-def]
        events.append(invocation)
        return run(self, invocation, *args, **kwargs)

    def preparing(self, case):  # type: ignore[no-untyped-def]
        events.append("prepare")
        return prepare(self, case)

    class Warming:
        def join(self) -> None:
            events.append("joined")

    def warming(device: torch.device, dtypes: list[torch.dtype]) -> Warming:
        events.append(("warm", device, tuple(dtypes)))
        return Warming()

    monkeypatch.setattr(process.Worker, "run", running)
    monkeypatch.setattr(executor.Executor, "prepare", preparing)
    monkeypatch.setattr(executor, "warm_beside", warming)
    report = audit(
        problem, f"{tmp_path / 'candidates.py'}::doubled", "quick", "cpu", ["numerics", "timing"]
    )
    assert report.verdict == "PASS"
    warmed = [e for e in events if isinstance(e, tuple)]
    assert len(warmed) == 1  # once an audit
    _, device, dtypes = warmed[0]
    assert device == torch.device("cpu")
    results = {
        problem.output_dtype(out, config)
        for config in problem.dtype_configs()
        for out in problem.outputs
    }
    assert set(dtypes) == results
    # beside the first run, which measures nothing on the device, and joined when it ends,
    # before the next case (its float64 truth) is made
    at = events.index(warmed[0])
    first, after = events[at + 1], events[at + 2 :]
    assert not any(call.timed or call.profiled or call.memory for call in first.calls)  # type: ignore[attr-defined]
    assert "joined" in after and "prepare" in after
    assert after.index("joined") < after.index("prepare")


def test_no_warm_up_runs_without_a_gpu() -> None:
    before = set(threading.enumerate())
    assert warm.warm_beside(torch.device("cpu"), [torch.float32]) is None
    assert {t.name for t in set(threading.enumerate()) - before} == set()


@_GPU
@pytest.mark.gpu
def test_the_warm_up_judges_every_kind_of_result_and_leaves_the_process_as_it_was() -> None:
    device = torch.device("cuda")
    dtypes = [
        torch.bfloat16,
        torch.float16,
        torch.float32,
        torch.float64,
        torch.float8_e4m3fn,
        torch.complex64,
        torch.complex128,
        torch.int64,
        torch.int32,
        torch.uint8,
        torch.bool,
    ]
    torch.cuda.synchronize(device)
    default, held, allocated = (
        torch.get_default_dtype(),
        DEVICE_COPIES.held_bytes(),
        torch.cuda.memory_allocated(device),
    )
    warm.warm_judging(device, dtypes)
    assert torch.get_default_dtype() == default
    assert DEVICE_COPIES.held_bytes() == held
    assert torch.cuda.memory_allocated(device) == allocated  # nothing it made is kept


@_GPU
@pytest.mark.gpu
def test_a_warm_up_that_fails_ends_quietly(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a kernel that cannot load")

    escaped: list[BaseException | None] = []
    monkeypatch.setattr(warm, "compare", broken)
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    thread = warm.warm_beside(torch.device("cuda"), [torch.float32])
    assert thread is not None
    thread.join()
    assert escaped == []
