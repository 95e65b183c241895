"""Audits spread over lanes give what one run in turn gives: the same verdicts, the reports in
the jobs' order, finding ids unique across them."""

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import kernelaudit
from kernelaudit.engine.lanes import Job, audit_in_lanes, deal, lane_count
from kernelaudit.profiles import profile_named
from kernelaudit.report import html

FIXTURES = Path(__file__).parent / "fixtures"


def test_whole_problems_go_to_lanes_the_longest_first():
    jobs = [Job("b", "1"), Job("a", "1"), Job("a", "2"), Job("c", "1"), Job("a", "3")]
    assert deal(jobs) == [[1, 2, 4], [0], [3]]
    # with each job's expected seconds, the problem expected to take longest starts first
    assert deal(jobs, [5.0, 1.0, 1.0, 60.0, 1.0]) == [[3], [0], [1, 2, 4]]
    assert lane_count("cpu", jobs[1:3]) == 1  # never more lanes than problems


@pytest.mark.slow
def test_lanes_keep_the_order_the_verdicts_and_unique_finding_ids():
    add = str(FIXTURES / "plain_add.py")
    scale = str(FIXTURES / "recorded_inputs.py")
    jobs = [
        Job(add, f"{add}::subtracted"),
        Job(scale, f"{scale}::doubled"),
        Job(add, f"{add}::summed"),
        Job(scale, f"{scale}::tripled"),
    ]
    idle: list[int] = []
    drawn: dict[int, str] = {}
    reports = audit_in_lanes(
        jobs,
        profile_named("quick"),
        "cpu",
        2,
        checks=["execution", "numerics"],
        idle=lambda: idle.append(len(drawn)),
        drawn=drawn.__setitem__,
    )
    assert [r.candidate.split("::")[-1] for r in reports] == [
        "subtracted",
        "doubled",
        "summed",
        "tripled",
    ]
    assert [r.verdict for r in reports] == ["FAIL", "PASS", "PASS", "FAIL"]
    ids = [f.id for r in reports for f in r.findings]
    assert len(ids) == len(set(ids))
    assert all(f.id.startswith(f"C{k + 1}.") for k, r in enumerate(reports) for f in r.findings)
    # a lane went idle once the first problem's two reports were in, and each report's HTML
    # section came back drawn in its lane, as the page would draw it
    assert idle == [2]
    assert [html.section(r, k) for k, r in enumerate(reports)] == [drawn[k] for k in range(4)]


_LANES_LAUNCHER = """
import multiprocessing, sys, threading, time
from kernelaudit.engine.lanes import Job, audit_in_lanes
from kernelaudit.profiles import profile_named

if __name__ == "__main__":
    jobs = [Job(sys.argv[1], sys.argv[1] + "::f")]
    threading.Thread(
        target=audit_in_lanes, args=(jobs, profile_named("quick"), "cpu", 1), daemon=True
    ).start()
    deadline = time.monotonic() + 60
    while not multiprocessing.active_children():
        if time.monotonic() > deadline:
            sys.exit("no lane started")
        time.sleep(0.05)
    print(multiprocessing.active_children()[0].pid, flush=True)
    time.sleep(120)
"""


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds processes through /proc")
def test_a_lane_ends_when_the_command_that_started_it_is_killed(tmp_path: Path) -> None:
    # killed with -9 (a CI job's time limit, an impatient user), the command cannot let its
    # lanes go: each would audit on for as long as its problem takes
    slow, read = tmp_path / "slow.py", tmp_path / "read"
    slow.write_text(f"import pathlib, time\n\npathlib.Path({str(read)!r}).touch()\n")
    slow.write_text(slow.read_text() + "time.sleep(120)\n")
    script = tmp_path / "launcher.py"  # a file: a spawned lane imports the main module
    script.write_text(_LANES_LAUNCHER)
    source = str(Path(kernelaudit.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([source, os.environ.get("PYTHONPATH", "")])}
    lane = 0
    launcher = subprocess.Popen(
        [sys.executable, str(script), str(slow)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert launcher.stdout is not None
        ready, _, _ = select.select([launcher.stdout], [], [], 90)
        assert ready, "the launcher named no lane within 90 s"
        lane = int(launcher.stdout.readline())
        # the lane starts (torch's import) and reads the slow problem
        deadline = time.monotonic() + 60
        while not read.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert read.exists() and _alive(lane)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 3
        while _alive(lane) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(lane)
    finally:
        launcher.kill()
        launcher.wait()
        if lane and _alive(lane) and b"multiprocessing" in _command_line(lane):
            os.kill(lane, signal.SIGKILL)  # the lane a failure leaves behind, still itself


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"
