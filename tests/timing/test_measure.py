"""Timing as a caller sees it: repetitions, statistics, outputs handed over outside the timed
region, a clock patched after import ignored; on CUDA, event times of known work and of work
left running on a side stream."""

from __future__ import annotations

import itertools
import json
import pickle
import statistics
import time

import pytest
import torch

from kernelaudit.errors import UsageError
from kernelaudit.timing.measure import time_calls

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
_PERF = time.perf_counter


def test_repetitions_stop_at_the_minimum_once_the_time_budget_is_spent():
    calls = []
    timing = time_calls(
        lambda: calls.append(1), "cpu", warmup=2, min_repetitions=7, target_seconds=0.0
    )
    assert (timing.repetitions, timing.warmup, len(timing.samples_s)) == (7, 2, 7)
    assert len(calls) == 2 + 7


def test_repetitions_stop_at_the_maximum_when_the_budget_is_not_spent():
    timing = time_calls(
        lambda: None, "cpu", min_repetitions=3, max_repetitions=25, target_seconds=60
    )
    assert timing.repetitions == 25


def test_repetitions_adapt_to_the_time_budget():
    timing = time_calls(
        lambda: time.sleep(0.002), "cpu", warmup=0, min_repetitions=5, target_seconds=0.05
    )
    assert 5 < timing.repetitions <= 26


def test_calls_that_take_seconds_stop_at_five_repetitions_and_short_ones_do_not():
    now = [0.0]

    def clock() -> float:
        return now[0]

    def takes(seconds: float):
        def call() -> None:
            now[0] += seconds

        return call

    long = time_calls(takes(0.5), "cpu", warmup=1, clock=clock)
    assert long.repetitions == 5 and long.median_s == pytest.approx(0.5)
    # a call of 100 ms reaches the two seconds only after twenty: the minimum of ten holds
    assert time_calls(takes(0.1), "cpu", warmup=1, clock=clock).repetitions == 10
    assert time_calls(takes(0.5), "cpu", min_repetitions=3, clock=clock).repetitions == 3


def test_on_output_gets_every_timed_result_in_order_and_is_not_timed():
    counter = itertools.count()
    seen = []

    def on_output(result: object, repetition: int) -> None:
        seen.append((result, repetition))
        time.sleep(0.01)

    timing = time_calls(
        lambda: next(counter),
        "cpu",
        warmup=2,
        min_repetitions=5,
        max_repetitions=5,
        on_output=on_output,
    )
    assert seen == [(2, 0), (3, 1), (4, 2), (5, 3), (6, 4)]
    assert timing.p90_s < 0.005


def test_statistics_are_ordered_and_taken_from_the_samples():
    timing = time_calls(lambda: sum(range(2000)), "cpu", target_seconds=0.02)
    assert 0 <= timing.p10_s <= timing.median_s <= timing.p90_s
    assert timing.median_s == pytest.approx(statistics.median(timing.samples_s))
    assert min(timing.samples_s) >= 0


# A sleep is never shorter than asked; on a busy host it wakes late, by a scheduler's slice or
# two: the figure is bounded below by the sleep and above by twice it.
SLEPT = (0.0049, 0.010)


def test_a_5_ms_sleep_measures_5_ms():
    timing = time_calls(lambda: time.sleep(0.005), "cpu", warmup=1, target_seconds=0.1)
    assert SLEPT[0] <= timing.median_s <= SLEPT[1]
    assert "host clock" in timing.method


def test_a_clock_patched_after_import_does_not_change_the_measurement(monkeypatch):
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    timing = time_calls(lambda: time.sleep(0.005), "cpu", warmup=1, target_seconds=0.1)
    assert SLEPT[0] <= timing.median_s <= SLEPT[1]


def test_the_callers_clock_is_the_one_read():
    def milliseconds() -> float:
        return _PERF() * 1e3

    timing = time_calls(lambda: time.sleep(0.005), "cpu", warmup=1, clock=milliseconds)
    assert 4.9 <= timing.median_s <= 7.5


def test_a_host_busy_only_while_the_timing_starts_does_not_zero_a_real_kernel():
    # a clock in microseconds whose reads cost what the host's load makes them cost: 40 us per
    # read while another process is busy (the first 80 reads), then 2 us; the call itself
    # takes 10 us
    now = [0.0]
    reads = itertools.count()

    def clock() -> float:
        now[0] += 40.0 if next(reads) < 80 else 2.0
        return now[0]

    def kernel() -> None:
        now[0] += 10.0

    timing = time_calls(kernel, "cpu", warmup=1, min_repetitions=100, target_seconds=0, clock=clock)
    # each sample is the call and one read, less the median empty call (one read)
    assert timing.median_s == pytest.approx(10.0)


def test_a_timing_travels_as_json_and_pickle():
    timing = time_calls(lambda: None, "cpu", min_repetitions=3, target_seconds=0)
    data = json.loads(json.dumps(timing.to_json()))
    assert data["repetitions"] == 3 and len(data["samples_s"]) == 3
    assert pickle.loads(pickle.dumps(timing)) == timing


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ({"warmup": -1}, "warmup"),
        ({"min_repetitions": 0}, "min_repetitions"),
        ({"min_repetitions": 5, "max_repetitions": 4}, "max_repetitions"),
        ({"target_seconds": float("nan")}, "target_seconds"),
    ],
)
def test_bad_counts_are_refused_by_name(arguments, named):
    with pytest.raises(UsageError, match=named):
        time_calls(lambda: None, "cpu", **arguments)


def test_a_device_that_is_not_one_is_refused():
    with pytest.raises(UsageError, match="not a torch device"):
        time_calls(lambda: None, "gpu please")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_a_gpu_is_refused_with_the_fix():
    with pytest.raises(UsageError, match="device='cpu'"):
        time_calls(lambda: None, "cuda")


def _cycles_per_second() -> float:
    timing = time_calls(lambda: torch.cuda._sleep(1_000_000), "cuda", target_seconds=0.05)
    return 1_000_000 / timing.median_s


@pytest.mark.gpu
@needs_cuda
def test_event_time_grows_in_proportion_to_the_work():
    cycles = int(200e-6 * _cycles_per_second())
    once = time_calls(lambda: torch.cuda._sleep(cycles), "cuda", target_seconds=0.1)
    twice = time_calls(lambda: torch.cuda._sleep(2 * cycles), "cuda", target_seconds=0.1)
    assert once.median_s == pytest.approx(200e-6, rel=0.1)
    # _sleep counts cycles of a clock that boosts and throttles: the ratio is only near 2
    assert twice.median_s / once.median_s == pytest.approx(2.0, rel=0.1)
    assert "CUDA events" in once.method and "L2 flushed" in once.method


@pytest.mark.gpu
@needs_cuda
def test_work_left_running_on_a_side_stream_is_charged(monkeypatch):
    cycles = int(1e-3 * _cycles_per_second())
    side = torch.cuda.Stream()

    def on_side_stream() -> None:
        with torch.cuda.stream(side):
            torch.cuda._sleep(cycles)

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    timing = time_calls(on_side_stream, "cuda", target_seconds=0.1)
    assert timing.median_s == pytest.approx(1e-3, rel=0.1)
