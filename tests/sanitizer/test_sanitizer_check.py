"""The sanitizer check as a user sees it. Without a GPU it says, in one note, that it needs one;
its runs are exercised on the CPU with a stand-in for compute-sanitizer that runs the child as
the real one would and prints captured output of the real tool."""

from __future__ import annotations

import os
import shlex
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from kernelaudit import Output, Problem, TensorInput
from kernelaudit.checks import sanitizer as sanitizer_check
from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.coverage import coverage
from kernelaudit.checks.sanitizer_findings import judged
from kernelaudit.engine.audit import audit
from kernelaudit.problem.load import load_problem
from kernelaudit.problem.spec import Axis
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.auditor import sandbox
from kernelaudit.runner.auditor.sandbox import Isolation
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.sanitizer import session as sanitizer_session
from kernelaudit.sanitizer.child import ChildResult
from kernelaudit.sanitizer.locate import Located
from kernelaudit.sanitizer.report import parse
from kernelaudit.sanitizer.run import Run, environment, run, sanitizer_command
from kernelaudit.sanitizer.session import Session, ToolRun, prepare, run_session

FIXTURES = Path(__file__).parent / "fixtures"
CANDIDATES = FIXTURES / "library_candidates.py"


@pytest.fixture(autouse=True)
def _unconfined(monkeypatch: pytest.MonkeyPatch) -> None:
    """The stand-in records what it was given in the test's folder, which the sandbox keeps
    every run from writing: these tests run the session unconfined (the real tool runs in the
    sandbox in the GPU tests)."""
    monkeypatch.setattr(sandbox, "isolation", lambda: Isolation("none", "a test's stand-in"))


def _stand_in(folder: Path, outputs: dict[str, str]) -> Path:
    """A compute-sanitizer that runs the child after "--", records its command line and the
    environment it ran the child in, and writes the fixture named for its tool to its log."""
    for tool, fixture in outputs.items():
        (folder / f"{tool}.txt").write_text((FIXTURES / f"{fixture}.txt").read_text())
    script = folder / "compute-sanitizer"
    script.write_text(
        f"#!{sys.executable}\n"
        "import os, subprocess, sys, time\n"
        "from pathlib import Path\n"
        "args = sys.argv[1:]\n"
        "tool = args[args.index('--tool') + 1]\n"
        f"folder = Path({str(folder)!r})\n"
        "(folder / f'{tool}.argv').write_text('\\n'.join(args))\n"
        "caching = os.environ.get('PYTORCH_NO_CUDA_MEMORY_CACHING', '')\n"
        "(folder / f'{tool}.caching').write_text(caching)\n"
        "began = time.time()\n"
        "code = subprocess.call(args[args.index('--') + 1:])\n"
        "(folder / f'{tool}.span').write_text(f'{began} {time.time()}')\n"
        "log = Path(args[args.index('--log-file') + 1])\n"
        "log.write_text((folder / f'{tool}.txt').read_text())\n"
        "sys.exit(code)\n"
    )
    script.chmod(0o755)
    return script


def _session(
    tmp_path: Path,
    function: str,
    outputs: dict[str, str],
    candidates: Path = CANDIDATES,
    **profile: object,
) -> Session:
    """A session of the copy problem's `function` in `candidates` under the stand-in tool,
    whose tools write the fixtures `outputs` names to their logs."""
    problem = load_problem(FIXTURES / "copy_problem.py")
    chosen = replace(PROFILES["quick"], **profile)  # type: ignore[arg-type]
    cases, built, dropped = prepare(problem, chosen)
    assert not dropped
    tool = _stand_in(tmp_path, outputs)
    candidate = parse_candidate(f"{candidates}::{function}")
    return run_session(problem, candidate, chosen, "cpu", str(tool), cases, built)


def test_on_a_cpu_the_report_says_the_check_could_not_run_for_want_of_cuda() -> None:
    report = audit(
        load_problem(FIXTURES / "copy_problem.py"),
        f"{CANDIDATES}::copy",
        "quick",
        "cpu",
        ["sanitizer"],
    )
    assert [f for f in report.findings if f.check == "sanitizer"] == []
    assert dict(report.unverified) == {"sanitizer": "needs a CUDA device"}
    assert report.verdict == "PASS"


def test_a_write_past_the_end_fails_naming_the_kernel_access_address_and_thread(
    tmp_path: Path,
) -> None:
    session = _session(tmp_path, "copy", {"memcheck": "memcheck_triton_oob"})
    assert session.plain_result is not None and session.plain_result.failures == ()
    assert session.cases == ("tail sizes n=513: n=513 | seed=0",)
    failures = judged(session, audit_s=3.0)
    assert [f.severity for f in failures] == ["fail", "note"]
    blamed, cost = failures
    assert blamed.title == (
        "memcheck: out-of-bounds global write of 4 bytes in kernel _oob_store (2 reports)"
    )
    evidence = dict(blamed.evidence)
    assert evidence["access"] == "global write of 4 bytes"
    assert evidence["address"].startswith("0x7f2c3a102e04 is out of bounds and is 0 bytes after")
    assert evidence["thread"] == "(1,0,0) in block (2,0,0)"
    assert evidence["where"].endswith("oob_store.py:19")
    assert cost.key == "cost" and "memcheck on 1 case(s)" in cost.title
    # the child ran under the tool, with torch's caching allocator off
    argv = (tmp_path / "memcheck.argv").read_text().splitlines()
    assert argv[argv.index("--") + 2 : argv.index("--") + 4] == [
        "-m",
        "kernelaudit.sanitizer.child",
    ]
    assert (tmp_path / "memcheck.caching").read_text() == "1"
    assert shlex.join(argv) in evidence["sanitizer command"]


def test_a_candidate_that_raises_is_noted_and_tools_stop_at_the_budget(tmp_path: Path) -> None:
    session = _session(tmp_path, "raises", {"memcheck": "tool_errors"}, sanitizer_budget_s=5.0)
    assert session.tools == ()
    assert session.skipped == (("memcheck", "5 s of the 5 s budget left"),)
    raised, cost = judged(session, audit_s=1.0)
    assert raised.severity == "note"
    assert "1 call(s) raised without the sanitizer" in raised.title
    assert "RuntimeError: no kernel for this size" in raised.title
    assert cost.title == (
        "compute-sanitizer ran no tool; skipped memcheck (5 s of the 5 s budget left)"
    )
    assert not (tmp_path / "memcheck.argv").exists()


def test_the_tools_run_side_by_side_with_the_plain_run(tmp_path: Path) -> None:
    session = _session(
        tmp_path,
        "copy",
        {"memcheck": "memcheck_clean", "initcheck": "memcheck_clean"},
        sanitizer_tools=("memcheck", "initcheck"),
    )
    assert [t.run.tool for t in session.tools] == ["memcheck", "initcheck"]
    spans = [
        [float(t) for t in (tmp_path / f"{tool}.span").read_text().split()]
        for tool in ("memcheck", "initcheck")
    ]
    # each run is a whole Python start: the second began before the first ended
    (first_began, first_ended), (second_began, second_ended) = spans
    assert second_began < first_ended and first_began < second_ended
    assert session.wall_s < session.sanitized_s + session.plain.seconds


@pytest.mark.parametrize(
    ("function", "key", "run"),
    [
        ("links_its_result", "plain-run:refused", "its run without the sanitizer"),
        ("links_the_tools_log", "memcheck:refused", "compute-sanitizer memcheck's run"),
    ],
)
def test_a_link_planted_where_the_auditor_reads_a_run_fails_the_candidate_unread(
    tmp_path: Path, function: str, key: str, run: str
) -> None:
    """The child's result and the tool's log lie in a folder the candidate's processes write:
    a link to a device that never ends is refused unread, and the candidate fails for it."""
    linking = FIXTURES / "linking_candidates.py"
    session = _session(tmp_path, function, {"memcheck": "memcheck_clean"}, linking)
    failing = [f for f in judged(session, audit_s=1.0) if f.severity == "fail"]
    assert [f.key for f in failing] == [key]
    assert failing[0].title.startswith(f"{run} left a file no honest run writes")
    assert "not a regular file" in failing[0].title or "could not be opened" in failing[0].title


def test_a_candidate_that_cannot_be_imported_stops_the_tools(tmp_path: Path) -> None:
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nraise ImportError('no such extension: fused_copy')\n")
    session = _session(tmp_path, "copy", {"memcheck": "memcheck_clean"}, broken)
    assert session.tools == ()
    assert session.skipped == (("memcheck", "the candidate could not be imported"),)
    assert session.plain_result is not None
    assert "no such extension: fused_copy" in session.plain_result.error


def test_runs_that_say_the_candidate_could_not_be_imported_leave_the_check_unverified(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the result of the run without a tool is written in the candidate's process: one that
    # says "could not be imported" there alone stops every tool, and the check checked nothing
    unimported = replace(
        _synthetic(), plain_result=ChildResult(error="ImportError: only under a sanitizer")
    )
    monkeypatch.setattr(sanitizer_check, "unavailable", lambda device: "")
    monkeypatch.setattr(sanitizer_check, "locate", lambda: Located("/usr/bin/true", ()))
    monkeypatch.setattr(sanitizer_check, "reference_kernels", lambda *args: ())
    monkeypatch.setattr(sanitizer_check, "run_session", lambda *args, **kwargs: unimported)
    problem = load_problem(FIXTURES / "copy_problem.py")
    ctx = PlanContext(
        problem, PROFILES["default"], "cuda", 132, parse_candidate(f"{CANDIDATES}::copy")
    )
    check = sanitizer_check.Sanitizer()
    check.plan(ctx)
    check.quiet()
    check.conclude([])
    said = coverage(check, ctx)
    assert said.startswith("could not run here: the candidate could not be imported")
    assert "only under a sanitizer" in said


def test_the_sanitizer_runs_beside_the_probes_within_the_profiles_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as if on a GPU with compute-sanitizer installed: the session itself is a stand-in
    started, release = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def session(*args: object, **kwargs: object) -> Session:
        seen["budget"] = args[7]
        started.set()
        release.wait(10)
        return _synthetic(_ran("memcheck", "memcheck_clean"))

    monkeypatch.setattr(sanitizer_check, "unavailable", lambda device: "")
    monkeypatch.setattr(sanitizer_check, "locate", lambda: Located("/usr/bin/true", ()))
    monkeypatch.setattr(sanitizer_check, "reference_kernels", lambda *args: ())
    monkeypatch.setattr(sanitizer_check, "run_session", session)
    problem = load_problem(FIXTURES / "copy_problem.py")
    profile = PROFILES["default"]
    check = sanitizer_check.Sanitizer()
    check.plan(PlanContext(problem, profile, "cuda", 132, parse_candidate(f"{CANDIDATES}::copy")))
    # started when the audit is planned, before any probe; its budget is the profile's own,
    # not a share of a time measured on the clock
    assert started.wait(10)
    assert seen["budget"] == profile.sanitizer_budget_s
    waited = threading.Thread(target=check.quiet)
    waited.start()
    waited.join(0.2)
    assert waited.is_alive()  # quiet waits for the runs to end
    release.set()
    waited.join(10)
    assert not waited.is_alive()
    (cost,) = [f for f in check.conclude([]) if f.key == "cost"]
    assert cost.title.startswith("compute-sanitizer ran memcheck on 1 case(s)")


def test_the_cost_note_gives_the_share_of_the_audit_the_sanitizer_took() -> None:
    ran = _ran("memcheck", "memcheck_clean")
    (cost,) = judged(_synthetic(ran), audit_s=12.0)
    # 12 s for the runs side by side (4 s plain, 12 s under the tool) and 12 s of the rest
    assert cost.title.endswith("the same run without it), 50% of the audit")


def _ran(tool: str, fixture: str, returncode: int | None = 0) -> ToolRun:
    log = (FIXTURES / f"{fixture}.txt").read_text()
    done = Run(tool, ("compute-sanitizer", "--tool", tool), 12.0, returncode, log, "")
    return ToolRun(done, parse(log, tool) if returncode is not None else None)


def _synthetic(*tools: ToolRun) -> Session:
    plain = Run("plain", ("python",), 4.0, 0, "", "")
    return Session(
        cases=("tail sizes n=513: n=513 | seed=0",),
        plain=plain,
        plain_result=ChildResult(error=""),
        tools=tools,
        skipped=(),
        reference_kernels=(),
        budget_s=300.0,
        wall_s=max([4.0, *(t.run.seconds for t in tools)]),
    )


def test_reports_in_library_kernels_make_one_note_and_no_failure() -> None:
    failures = judged(_synthetic(_ran("initcheck", "initcheck_library_only")), audit_s=1.0)
    assert [f.key for f in failures] == ["library-kernels", "cost"]
    assert all(f.severity == "note" for f in failures)
    library = failures[0]
    assert library.title == (
        "compute-sanitizer reports not blamed on the candidate: 2 inside library kernels "
        "(sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1x1_execute"
        "_segment_k_off_kernel__5x_cublas, splitKreduce_kernel) and 1 outside any kernel"
    )


def test_each_tool_fails_in_its_own_terms() -> None:
    session = _synthetic(
        _ran("initcheck", "initcheck_reads"),
        _ran("synccheck", "synccheck_divergent"),
        _ran("racecheck", "racecheck_analysis"),
    )
    titled = {f.title: f.severity for f in judged(session, audit_s=1.0) if f.severity != "note"}
    assert titled == {
        "initcheck: kernel _accumulate_rows reads uninitialised global memory (4-byte reads, "
        "1 report)": "fail",
        "synccheck: Barrier error detected. Divergent thread(s) in block in kernel block_reduce "
        "(1 report)": "fail",
        "racecheck: shared-memory race between write and read accesses in kernel _softmax_rows "
        "(256 hazards, 1 report)": "fail",
        "racecheck: shared-memory race between write accesses in kernel warp_sum (32 hazards, "
        "1 report)": "warn",
    }


def test_runs_that_could_not_check_are_notes_not_failures() -> None:
    session = _synthetic(
        _ran("memcheck", "tool_errors"),
        _ran("initcheck", "memcheck_cut_short", returncode=None),
        _ran("synccheck", "memcheck_cut_short"),
    )
    failures = judged(session, audit_s=1.0)
    notes = [f.key for f in failures if f.severity == "note"]
    assert notes == ["memcheck:tool-error", "initcheck:stopped", "synccheck:cut-short", "cost"]
    assert "Device not supported" in failures[0].title
    # what the cut-short run did print is still judged
    assert [f.title for f in failures if f.severity == "fail"] == [
        "synccheck: out-of-bounds global read of 2 bytes in kernel _gather_kernel (2 reports)"
    ]


def test_a_run_stopped_for_what_it_wrote_fails_the_candidate() -> None:
    # a memory bound can stop an honest run (a note above); writing past a folder's bound is
    # not what a kernel's run does
    why = "the candidate's processes wrote more than 71 MiB to its job's folder, ..."
    stopped = Run("memcheck", ("compute-sanitizer",), 3.0, None, "", "", over_disk=why)
    failures = judged(_synthetic(ToolRun(stopped, None)), audit_s=1.0)
    (failed,) = [f for f in failures if f.severity == "fail"]
    assert failed.key == "memcheck:disk" and why in failed.title


def test_errors_counted_in_a_form_that_cannot_be_read_are_a_warning() -> None:
    text = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 3 errors\n"
    done = Run("memcheck", ("compute-sanitizer",), 5.0, 86, text, "")
    failures = judged(_synthetic(ToolRun(done, parse(text, "memcheck"))), audit_s=1.0)
    assert [(f.key, f.severity) for f in failures] == [
        ("memcheck:unread", "warn"),
        ("cost", "note"),
    ]


def test_memcheck_alone_pads_allocations_and_racecheck_is_filtered_to_named_kernels() -> None:
    child = ["python", "-m", "kernelaudit.sanitizer.child", "request", "result"]
    memcheck = sanitizer_command("cs", "memcheck", Path("m.log"), 42.7, (), child)
    assert memcheck[:3] == ["cs", "--tool", "memcheck"]
    assert memcheck[memcheck.index("--launch-timeout") + 1] == "42"
    assert memcheck[memcheck.index("--padding") + 1] == "65536"
    assert memcheck[memcheck.index("--") + 1 :] == child
    racecheck = sanitizer_command("cs", "racecheck", Path("r.log"), 100.0, ("_a", "_b"), child)
    assert "--padding" not in racecheck and "--report-api-errors" not in racecheck
    filters = [racecheck[i + 1] for i, word in enumerate(racecheck) if word == "--kernel-name"]
    assert filters == ["kns=_a", "kns=_b"]


def test_a_run_past_its_limit_is_killed_with_everything_it_started(tmp_path: Path) -> None:
    started = tmp_path / "grandchild.pid"
    script = (
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(started)!r}, 'w').write(str(child.pid))\n"
        "time.sleep(60)\n"
    )
    done = run("memcheck", [sys.executable, "-c", script], *_in(tmp_path, 2.0))
    assert done.timed_out and done.seconds < 20 and done.log == ""
    grandchild = int(started.read_text())
    # SIGKILL takes effect asynchronously: on a loaded machine the process may take a moment
    deadline = time.monotonic() + 10.0
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(grandchild)


def test_a_run_whose_audit_ended_is_stopped_at_once(tmp_path: Path) -> None:
    stop = threading.Event()
    threading.Timer(0.5, stop.set).start()
    began = time.monotonic()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    done = run("memcheck", sleeper, *_in(tmp_path, 60.0), stop=stop)
    assert done.returncode is None and time.monotonic() - began < 10


def test_a_run_holding_more_host_memory_than_allowed_is_stopped_and_noted(
    tmp_path: Path,
) -> None:
    hoard = [sys.executable, "-c", "import time; b = b'x' * (2 << 30); time.sleep(60)"]
    limit = 3 << 29
    done = run("memcheck", hoard, *_in(tmp_path, 60.0), host_memory_bytes=limit)
    assert done.returncode is None and not done.timed_out and done.seconds < 30
    assert "GiB of host memory, more than the limit of 1.50 GiB" in done.over_memory
    failures = judged(_synthetic(ToolRun(done, None)), audit_s=1.0)
    assert [(f.key, f.severity) for f in failures] == [
        ("memcheck:host-memory", "note"),
        ("cost", "note"),
    ]
    assert "what it reported until then is judged" in failures[0].title


def _in(folder: Path, limit_s: float) -> tuple[dict[str, str], float, Path, Path, Path]:
    """`run`'s environment, limit, log, candidate and scratch for a command run in `folder`."""
    candidate = folder / "candidate.py"
    candidate.write_text("")
    return environment("cpu"), limit_s, folder / "x", candidate, folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        status = Path(f"/proc/{pid}/status").read_text()
    except (ProcessLookupError, FileNotFoundError):
        return False
    # a killed process lingers as a zombie until its parent (gone) is reaped by init
    return "zombie" not in status.lower()


def test_a_case_whose_inputs_would_take_the_runs_past_host_memory_is_left_out_before_it_is_made(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # rows of a fixed 2^20 float32 columns: the tail-sizes case (5 rows, 20 MiB), then the
    # workload (8 rows, 32 MiB); four runs at once may hold 100 MiB together
    wide = 1 << 20
    problem = Problem(
        name="scale_rows",
        reference=lambda x: 2 * x,
        axes=("rows", Axis("cols", min=wide, max=wide)),
        inputs=(TensorInput("x", ("rows", "cols")),),
        outputs=(Output("y", ("rows", "cols"), dtype="x"),),
        workloads=({"rows": 8, "cols": wide},),
    )
    made: list[str] = []
    arguments = sanitizer_session.arguments
    monkeypatch.setattr(
        sanitizer_session,
        "arguments",
        lambda problem, case: made.append(case.label) or arguments(problem, case),
    )
    # the default profile's plain run and three tools: four runs at once
    limited = replace(PROFILES["default"], sanitizer_cases=2, host_memory_bytes=100 << 20)
    assert len(limited.sanitizer_tools) == 3
    cases, built, dropped = prepare(problem, limited)
    assert [case.label for case in cases] == made == ["tail sizes rows=5 cols=1048576"]
    assert len(built) == 1
    assert dropped == [
        "workload 0: its inputs take 0.03 GiB, held by each of the 4 sanitizer runs at once, "
        "more than the 0.10 GiB of host memory the candidate's processes may hold"
    ]
    # with the machine's half, both are made
    assert len(prepare(problem, replace(limited, host_memory_bytes=0))[0]) == 2
