"""Each audit holds its thread pools, and those of every process it starts, to its share of
the host's cores."""

import os
import subprocess
import sys

import pytest

from kernelaudit.engine.lanes import Job, lane_count
from kernelaudit.runner.auditor import threads
from kernelaudit.runner.auditor.launch import child_environment
from kernelaudit.runner.auditor.threads import THREADS_VARIABLE, thread_share, usable_cores


def test_an_audit_told_its_share_takes_it(monkeypatch):
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    assert thread_share("cpu") == 1


def test_a_lone_audit_on_the_cpu_takes_every_core(monkeypatch):
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert thread_share("cpu") == usable_cores()
    assert thread_share("cpu", sharing=usable_cores() * 4) == 1


def test_the_candidates_processes_start_with_the_audits_share(monkeypatch):
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    env = child_environment("cpu")
    assert env["OMP_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert THREADS_VARIABLE not in env, "no variable of kernelaudit's own is left to be seen"
    # and torch, started with that environment, sizes its pool to it
    shown = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert shown.strip() == "1"


@pytest.mark.parametrize("told", ["0", "many", ""])
def test_a_meaningless_share_is_ignored(monkeypatch, told):
    monkeypatch.setenv(THREADS_VARIABLE, told)
    assert thread_share("cpu") == usable_cores()


def test_a_command_told_its_share_of_the_host_divides_that_among_its_lanes(monkeypatch):
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    jobs = [Job(f"problem{i}.py", "candidates.py::kernel") for i in range(4)]
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)
    assert lane_count("cpu", jobs) == 4
    # a test runner or a scheduler gave this command two of the eight cores
    monkeypatch.setenv(THREADS_VARIABLE, "2")
    assert lane_count("cpu", jobs) == 2
    assert thread_share("cpu") == 2


def test_idle_threads_of_the_auditor_and_its_candidates_processes_sleep_soon(monkeypatch):
    _no_waiting_policy(monkeypatch)
    assert child_environment("cpu")["GOMP_SPINCOUNT"] == threads.WAIT_VARIABLES["GOMP_SPINCOUNT"]
    threads.settle_waits()
    assert os.environ["GOMP_SPINCOUNT"] == threads.WAIT_VARIABLES["GOMP_SPINCOUNT"]


@pytest.mark.parametrize(
    ("name", "value"), [("OMP_WAIT_POLICY", "active"), ("GOMP_SPINCOUNT", "5")]
)
def test_a_waiting_policy_chosen_by_the_user_is_kept(monkeypatch, name, value):
    _no_waiting_policy(monkeypatch)
    monkeypatch.setenv(name, value)
    threads.settle_waits()
    env = child_environment("cpu")
    assert env[name] == value
    assert "GOMP_SPINCOUNT" not in env or name == "GOMP_SPINCOUNT"


def _no_waiting_policy(monkeypatch):
    """No waiting policy in this process's environment, and whatever a test sets there undone
    after it."""
    for name in ("GOMP_SPINCOUNT", "OMP_WAIT_POLICY"):
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
