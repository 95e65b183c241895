import re
from pathlib import Path

import pytest
import torch
from rich.console import Console
from running_corpora import identity_at

from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.progress import Throughput, job_line
from kernelaudit.corpus.runnable import device_memory, least_bytes, why_unrunnable
from kernelaudit.corpus.store import JobResult
from kernelaudit.formats import read_problem


def _identity(tmp_path: Path, rows: str, cols: str) -> Path:
    path = tmp_path / f"identity_{len(rows)}_{len(cols)}.py"
    path.write_text(identity_at(rows, cols))
    return path


def test_the_least_memory_counts_inputs_and_outputs_with_their_float64_truth(
    tmp_path: Path,
) -> None:
    problem = read_problem(_identity(tmp_path, "8", "16"))
    # x in, y out: 128 float32 elements each, and each one's float64 copy
    assert least_bytes(problem) == 2 * 128 * (4 + 8)
    assert why_unrunnable(problem, "cpu") is None


def test_a_problem_larger_than_the_device_is_unrunnable_with_the_figures(tmp_path: Path) -> None:
    problem = read_problem(_identity(tmp_path, "2**20", "2**20"))
    capacity, _ = device_memory("cpu")
    assert least_bytes(problem) > capacity
    reason = why_unrunnable(problem, "cpu")
    assert reason is not None
    assert re.fullmatch(
        r"its smallest workload needs at least 24576\.0 GiB \(.*\), more than the [\d.]+ GiB "
        r"of this host's memory",
        reason,
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_gpu_memory_is_the_limit_on_a_gpu() -> None:
    capacity, what = device_memory("cuda")
    assert capacity == torch.cuda.get_device_properties(0).total_memory
    assert torch.cuda.get_device_name(0) in what


def test_throughput_gives_the_rate_and_the_time_left() -> None:
    assert str(Throughput(3, 40, 90.0)) == "3/40, 120 jobs/hour, ETA 18 min"
    assert str(Throughput(1, 2, 10.0)) == "1/2, 360 jobs/hour, ETA 10 s"
    assert Throughput(1, 500, 60.0).eta == "ETA 8.3 h"
    assert Throughput(40, 40, 900.0).eta == "done"


def test_a_job_line_gives_its_outcome_place_seconds_and_why_it_was_not_audited() -> None:
    job = Job("/c/softmax/problem.py", "/c/softmax/candidates/fused.py::fused")
    timeout = JobResult("k", job, None, "no result within 60 s\nlog", "cuda:1", 60.2, "timeout")
    console = Console(record=True, width=200)
    console.print(job_line(timeout, Throughput(2, 9, 120.0)), soft_wrap=True)
    assert console.export_text() == (
        "[2/9, 60 jobs/hour, ETA 7 min] timeout    softmax / fused.py::fused  "
        "(60.2 s, cuda:1): no result within 60 s\n"
    )
