"""Kernel times from the profiler and their agreement with event timing."""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.timing.kernels import (
    KernelProfile,
    KernelTime,
    agreement,
    busy_time,
    device_spans,
    is_mismatch,
    profile_kernels,
)
from kernelaudit.timing.measure import Timing, time_calls

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _timing(median_s: float) -> Timing:
    return Timing(median_s, median_s, median_s, 10, 3, "made up", 0.0, (median_s,) * 10)


def _profile(busy_s: float) -> KernelProfile:
    return KernelProfile((KernelTime("gemm_kernel", 1.0, busy_s),), busy_s, busy_s, 3)


def test_a_cpu_profile_is_empty_and_runs_nothing():
    def must_not_run() -> None:
        raise AssertionError("profiled on a CPU")

    profile = profile_kernels(must_not_run, "cpu")
    assert (profile.kernels, profile.total_s, profile.busy_s, profile.calls) == ((), 0.0, 0.0, 0)


def test_profiling_no_calls_is_refused():
    with pytest.raises(UsageError, match="calls=0"):
        profile_kernels(lambda: None, "cpu", calls=0)


def test_device_work_is_read_from_the_trace_in_seconds():
    trace = {
        "traceEvents": [
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 100.0, "dur": 50.0},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD", "ts": 160.0, "dur": 10.0},
            {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 170.0, "dur": 1.0},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "range", "ts": 100, "dur": 71},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 90.0, "dur": 30.0},
            {"ph": "s", "cat": "ac2g", "name": "flow", "ts": 95.0},
        ]
    }
    spans = device_spans(trace)
    assert [name for name, _, _ in spans] == ["gemm", "Memcpy DtoD", "Memset (Device)"]
    assert spans[0][1:] == (pytest.approx(100e-6), pytest.approx(50e-6))


def test_busy_time_counts_overlapping_kernels_once():
    spans = [("a", 0.0, 2.0), ("b", 1.0, 2.0), ("c", 5.0, 1.0), ("d", 5.5, 0.1)]
    assert busy_time(spans) == pytest.approx(4.0)
    assert busy_time([]) == 0.0


def test_close_times_agree():
    gap, sentence = agreement(_timing(1.02e-3), _profile(1.0e-3))
    assert gap == pytest.approx(0.02)
    assert "within 5%" in sentence
    assert not is_mismatch(gap, _profile(1.0e-3))


def test_an_event_time_above_the_kernels_is_a_mismatch_with_a_reason():
    gap, sentence = agreement(_timing(1.2e-3), _profile(1.0e-3))
    assert gap == pytest.approx(0.2)
    assert "mismatch" in sentence and "launch gaps" in sentence
    assert is_mismatch(gap, _profile(1.0e-3))


def test_an_event_time_below_the_kernels_points_at_other_streams():
    gap, sentence = agreement(_timing(0.8e-3), _profile(1.0e-3))
    assert gap == pytest.approx(0.2)
    assert "mismatch" in sentence and "another stream" in sentence


def test_a_gap_on_tiny_kernels_is_not_judged():
    gap, sentence = agreement(_timing(30e-6), _profile(20e-6))
    assert gap == pytest.approx(0.5)
    assert "not judged" in sentence and "launch gaps" in sentence
    assert not is_mismatch(gap, _profile(20e-6))


def test_nothing_to_compare_gives_nan_and_says_why():
    gap, sentence = agreement(_timing(1e-3), profile_kernels(lambda: None, "cpu"))
    assert math.isnan(gap)
    assert "not cross-checked" in sentence and "CPU" in sentence


def test_a_profile_travels_as_json_and_pickle():
    profile = _profile(1e-3)
    assert json.loads(json.dumps(profile.to_json()))["kernels"][0]["name"] == "gemm_kernel"
    assert pickle.loads(pickle.dumps(profile)) == profile


@pytest.mark.gpu
@needs_cuda
def test_a_matmul_profile_lists_a_gemm_kernel():
    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    profile = profile_kernels(lambda: a @ a, "cuda")
    names = " ".join(k.name.lower() for k in profile.kernels)
    assert any(word in names for word in ("gemm", "nvjet", "cutlass", "xmma"))
    assert profile.calls == 3 and profile.busy_s > 0
    assert profile.kernels[0].launches == pytest.approx(1.0)


@pytest.mark.gpu
@needs_cuda
def test_a_fresh_process_profiles_every_call_it_is_asked_for():
    # a worker is a fresh process: the profiler's start-up in it is not one of the calls'
    # sessions, and does not use up the time they are held to
    # and profiling imports nothing of torch's compiler stack, whose import cost every
    # worker a second or more on its first profiled call
    script = (
        "import sys, torch; from kernelaudit.timing.kernels import profile_kernels; "
        "a = torch.randn(2048, 2048, device='cuda', dtype=torch.bfloat16); "
        "print(profile_kernels(lambda: a @ a, 'cuda').calls); "
        "print(sorted(m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules))"
    )
    ran = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr[-2000:]
    calls, imported = ran.stdout.strip().splitlines()[-2:]
    assert calls == "3"
    assert imported == "[]"


@pytest.mark.gpu
@needs_cuda
def test_copies_are_named_entries():
    source = torch.randn(2**20, device="cuda")
    target = torch.empty_like(source)
    profile = profile_kernels(lambda: target.copy_(source), "cuda")
    assert any("Memcpy" in k.name for k in profile.kernels)


@pytest.mark.gpu
@needs_cuda
def test_kernels_on_two_streams_at_once_are_busy_for_one():
    streams = [torch.cuda.Stream(), torch.cuda.Stream()]

    def two_at_once() -> None:
        for stream in streams:
            with torch.cuda.stream(stream):
                torch.cuda._sleep(1_000_000)

    profile = profile_kernels(two_at_once, "cuda")
    # the second launch starts a few microseconds after the first: the overlap is partial,
    # but overlapped time is counted once
    assert 0.45 * profile.total_s <= profile.busy_s <= 0.8 * profile.total_s


@pytest.mark.gpu
@needs_cuda
def test_event_time_of_one_long_kernel_agrees_with_the_profiler():
    def sleep() -> None:
        torch.cuda._sleep(2_000_000)

    gap, sentence = agreement(time_calls(sleep, "cuda"), profile_kernels(sleep, "cuda"))
    assert gap < 0.05, sentence


@pytest.mark.gpu
@needs_cuda
def test_a_call_of_many_launches_is_profiled_once_and_counted_per_call(monkeypatch):
    # a recurrence stepped from Python: thousands of launches a call make a session of the
    # profiler take seconds, so later sessions are left out once the first took that long
    import kernelaudit.timing.kernels as kernels

    x = torch.zeros(1024, device="cuda")

    def stepped() -> None:
        for _ in range(2000):
            x.add_(1.0)

    monkeypatch.setattr(kernels, "PROFILED_SECONDS", 0.0)
    profile = profile_kernels(stepped, "cuda", calls=3)
    assert profile.calls == 1
    assert sum(k.launches for k in profile.kernels) == pytest.approx(2000)
    monkeypatch.setattr(kernels, "PROFILED_SECONDS", 3600.0)
    assert profile_kernels(stepped, "cuda", calls=3).calls == 3
