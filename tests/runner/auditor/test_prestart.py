"""`kernelaudit check` starts its first candidate's worker before it imports torch; the audit
runs in that process only when it is the one the audit would have started."""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from kernelaudit.cli import _parser
from kernelaudit.formats import read_candidate, read_problem
from kernelaudit.runner.auditor import prestart
from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.auditor.threads import visible_gpus
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import parse_candidate

FIXTURE = Path(__file__).parents[1] / "fixtures" / "behaviours.py"
NAMES_FIXTURE = Path(__file__).parents[1] / "fixtures" / "shared_state.py"
SOL = Path(__file__).parents[2] / "formats" / "fixtures" / "solexecbench" / "embedding_rmsnorm"


@pytest.fixture(autouse=True)
def nothing_left_over() -> Iterator[None]:
    yield
    prestart.discard()


def _early_process() -> subprocess.Popen[bytes]:
    early = prestart._early
    assert early is not None, "no worker was started early"
    return early.child.process


def test_the_command_up_to_the_workers_start_imports_no_torch() -> None:
    code = (
        "import sys; import kernelaudit.__main__, kernelaudit.formats; "
        "from kernelaudit.formats.solexecbench.solution import unpack_solution; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_every_option_of_check_that_takes_a_value_is_known_ahead() -> None:
    check = next(
        action.choices["check"]
        for action in _parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    )
    taking = {
        option
        for action in check._actions
        if action.option_strings and action.nargs != 0
        for option in action.option_strings
        if option.startswith("--")
    }
    assert taking == set(prestart.VALUE_OPTIONS)


def test_the_audit_runs_in_the_worker_started_for_its_candidate(device: str) -> None:
    spec = f"{FIXTURE}::candidate"
    prestart.start_for(
        ["check", "problem.py", "--profile", "quick", spec, "--device", device, "--strict"]
    )
    early = _early_process()
    with Worker(parse_candidate(spec), device, timeout_s=30.0) as worker:
        result = worker.run(
            Invocation(calls=(Call(args=(0, TensorArg(torch.ones(3)), TensorArg(torch.ones(3)))),))
        )
        assert result.error == ""
        assert early.poll() is None, "the early worker should be the one running the calls"
        assert prestart._early is None
    assert early.poll() is not None, "closing the worker ends the early process too"


def test_a_worker_started_for_another_candidate_is_ended_and_not_used() -> None:
    prestart.start_for(["check", "problem.py", f"{NAMES_FIXTURE}::column_total", "--device", "cpu"])
    early = _early_process()
    with Worker(parse_candidate(f"{FIXTURE}::candidate"), "cpu", timeout_s=30.0) as worker:
        assert early.wait(timeout=10) is not None
        result = worker.run(
            Invocation(calls=(Call(args=(0, TensorArg(torch.ones(3)), TensorArg(torch.ones(3)))),))
        )
        assert result.error == ""


def test_a_worker_started_for_another_device_is_not_used() -> None:
    if visible_gpus() and torch.cuda.is_available():
        pytest.skip("on this machine cpu and cuda workers start with the same environment")
    spec = f"{FIXTURE}::candidate"
    prestart.start_for(["check", "problem.py", spec, "--device", "cuda"])
    early = _early_process()
    assert prestart.take(FIXTURE, "cpu") is None
    assert early.wait(timeout=10) is not None


def test_a_solution_is_unpacked_ahead_into_the_file_the_audit_imports() -> None:
    solution = SOL / "good_solution.json"
    prestart.start_for(["check", str(SOL), str(solution), "--device", "cpu"])
    early = prestart._early
    assert early is not None
    _, ref = read_candidate(str(solution), read_problem(SOL))
    assert early.candidate == str(Path(ref.path).resolve())


@pytest.mark.parametrize(
    "arguments",
    [
        ["demo"],
        ["check", "problem.py"],
        ["check", "problem.py", "missing.py::f"],
        ["check", "problem.py", "model_new.py"],
        ["check", "problem.py", f"{FIXTURE}::candidate", "--device", "tpu"],
    ],
)
def test_nothing_starts_early_where_the_arguments_do_not_name_a_file_to_import(
    arguments: list[str],
) -> None:
    prestart.start_for(arguments)
    assert prestart._early is None


def test_the_files_read_before_the_early_worker_serve_one_command(tmp_path: Path) -> None:
    problem, candidate = tmp_path / "problem.py", tmp_path / "model_new.py"
    problem.write_text("# a problem\n")
    candidate.write_text("# a KernelBench candidate: no worker starts early for it\n")
    prestart.start_for(["check", str(problem), str(candidate), "--device", "cpu"])
    candidate.write_text("# rewritten once the command had read it\n")
    (early,) = prestart.files_as_read(str(problem), [str(candidate)])
    (now,) = prestart.files_as_read(str(problem), [str(candidate)])
    assert early.candidate_sha256 != now.candidate_sha256  # read before, then read afresh
    assert early.problem_sha256 == now.problem_sha256
