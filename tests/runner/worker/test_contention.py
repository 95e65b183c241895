"""Calls under contention in the worker: several host threads calling the candidate at once,
each compared bit for bit with the call made alone, and calls under noise kernels (on a GPU)."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelaudit.checks.memory import HELD_BYTES
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, InvocationResult, TensorArg
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "shared_state.py"
GPU = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _names() -> tuple[str, ...]:
    spec = importlib.util.spec_from_file_location("runner_shared_state", FIXTURE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.NAMES


NAMES = _names()
X = torch.arange(32 * 8, dtype=torch.float32).reshape(32, 8) % 9 - 4


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=GPU)])
def worker(request: pytest.FixtureRequest) -> Iterator[Worker]:
    with Worker(parse_candidate(f"{FIXTURE}::candidate"), request.param, timeout_s=30) as running:
        yield running


def alone_then(worker: Worker, behaviour: str, **options: object) -> InvocationResult:
    """A call alone, then one with `options` (threads, noise, ...)."""
    args = (NAMES.index(behaviour), TensorArg(X))
    calls = (Call(args=args), Call(args=args, **options))  # type: ignore[arg-type]
    return worker.run(Invocation(calls=calls))


def test_noise_and_memory_are_measured_on_a_gpu_only(worker: Worker) -> None:
    result = alone_then(worker, "column_total", noise=True, memory=True)
    assert result.error == ""
    outcome = result.calls[1]
    assert outcome.mismatches == ()
    if worker.device == "cpu":
        assert outcome.noise_kernels == 0
        assert (outcome.device_bytes_held, outcome.device_peak_bytes) == (-1, -1)
    else:
        assert outcome.noise_kernels >= 2
        # first in this worker: nothing is allocated but what the harness holds, and at most
        # a library workspace torch could not hand back
        assert 0 <= outcome.device_bytes_held < HELD_BYTES
        assert outcome.device_peak_bytes >= X.shape[1] * 4


def test_threads_of_a_stateless_candidate_agree_bit_for_bit(worker: Worker) -> None:
    result = alone_then(worker, "column_total", threads=3)
    assert result.error == ""
    outcome = result.calls[1]
    assert outcome.mismatches == ()
    assert outcome.thread_errors == ("", "", "")
    assert outcome.thread_fingerprints == (outcome.fingerprints,) * 3
    assert [torch.equal(o[0], X.sum(dim=0)) for o in outcome.thread_outputs] == [True] * 3


def test_threads_sharing_an_accumulator_differ_from_the_call_alone(worker: Worker) -> None:
    result = alone_then(worker, "shared_accumulator", threads=3)
    assert result.error == ""
    outcome = result.calls[1]
    assert outcome.thread_errors == ("", "", "")
    # the call made alone agrees with the first; threads running together do not
    assert {runner for runner, *_ in outcome.mismatches} <= {0, 1, 2}
    assert outcome.mismatches
    runner, output, count, first, largest = outcome.mismatches[0]
    produced, expected = outcome.thread_outputs[runner][output], X.sum(dim=0)
    differ = produced != expected
    assert count == int(differ.sum())
    assert first == int(differ.nonzero()[0, 0])
    assert largest == float((produced - expected).abs().max())


def test_a_thread_that_fails_is_reported_with_its_error(worker: Worker) -> None:
    result = alone_then(worker, "not_reentrant", threads=3)
    assert result.error == ""
    errors = result.calls[1].thread_errors
    assert len(errors) == 3
    assert any("already running in another thread" in e for e in errors)
    assert "" in errors  # one of them got in
