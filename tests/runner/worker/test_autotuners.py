"""Triton autotuners seen from the worker: found and described, runnable under the interpreter,
and made to run one configuration of choice, or to say why it cannot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "autotuned.py"
DOUBLE = "autotuned.py::_double"


@pytest.fixture(scope="module")
def worker() -> Iterator[Worker]:
    with Worker(parse_candidate(f"{FIXTURE}::double"), "cpu", timeout_s=60) as running:
        yield running


def doubled(n: int, autotune: tuple[str, int] | None = None) -> Invocation:
    x = torch.arange(n, dtype=torch.float32)
    return Invocation(calls=(Call(args=(TensorArg(x),), autotune=autotune),))


def test_the_worker_reports_every_autotuner_with_its_configurations(worker: Worker) -> None:
    result = worker.run(doubled(40))
    assert result.error == ""
    assert result.autotuners == (
        (DOUBLE, ("BLOCK=8, num_warps=1, num_stages=3", "BLOCK=32, num_warps=2, num_stages=3")),
    )
    # the interpreter cannot time configurations: the autotuner takes its first, untimed
    y, used = result.calls[0].outputs
    assert torch.equal(y, torch.arange(40, dtype=torch.float32) * 2)
    assert used.tolist() == [8]
    assert result.calls[0].forced_runs == 0


def test_a_forced_configuration_is_the_one_that_runs(worker: Worker) -> None:
    result = worker.run(doubled(40, (DOUBLE, 1)))
    assert (result.error, result.not_run) == ("", "")
    y, used = result.calls[0].outputs
    assert used.tolist() == [32]
    assert torch.equal(y, torch.arange(40, dtype=torch.float32) * 2)
    assert result.calls[0].forced_runs == 1
    # forcing ends with the call: the next one is the autotuner's own choice again
    assert worker.run(doubled(40)).calls[0].outputs[1].tolist() == [8]


@pytest.mark.parametrize(
    ("n", "autotune", "reason"),
    [
        (10, (DOUBLE, 1), "prunes configuration 1 (BLOCK=32, num_warps=2, num_stages=3)"),
        (40, (DOUBLE, 5), "has 2 configurations, no configuration 5"),
        (40, ("autotuned.py::_triple", 0), "no autotuner named autotuned.py::_triple"),
    ],
)
def test_a_configuration_that_cannot_run_is_reported_as_not_run_not_as_an_error(
    worker: Worker, n: int, autotune: tuple[str, int], reason: str
) -> None:
    result = worker.run(doubled(n, autotune))
    assert result.error == ""
    assert result.calls == ()
    assert reason in result.not_run
