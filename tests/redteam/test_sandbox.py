"""Candidates that attack their audit instead of computing. Each ends in FAIL for itself or in
nothing at all, and leaves every file the auditor reads, and every other process, as it was.
The sandbox's tests run where bubblewrap can confine a process (the test command installs it);
the channel's bound holds everywhere."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from attacks import files_in, survivors_after

from kernelaudit.engine.audit import audit
from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import PROFILES
from kernelaudit.runner.auditor import limits, sandbox
from kernelaudit.runner.auditor.launch import child_environment, run_python
from kernelaudit.runner.auditor.sandbox import isolation

FIXTURES = Path(__file__).parent / "fixtures"

confined = pytest.mark.skipif(
    not isolation().confined, reason=f"no sandbox on this machine: {isolation().reason}"
)


def _copy(tmp_path: Path) -> Path:
    """The fixtures in a folder of the test's own: attacks may (try to) write there."""
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    return tmp_path / "fixtures"


def _audit(root: Path, candidate: str) -> AuditReport:
    problem = load_problem(root / "problem" / "double.py")
    spec = f"{root / 'candidates' / candidate}.py::double"
    return audit(problem, spec, "quick", "cpu", ["numerics", "execution"])


@confined
def test_a_candidate_cannot_write_next_to_the_problem_or_to_its_own_folder(
    tmp_path: Path,
) -> None:
    root = _copy(tmp_path)
    problem_files = files_in(root / "problem")
    own_files = files_in(root / "candidates")
    report = _audit(root, "plants_files")
    assert report.verdict == "PASS"  # it computes correctly; its writes went nowhere
    assert report.confined
    assert files_in(root / "problem") == problem_files
    assert files_in(root / "candidates") == own_files


@confined
def test_a_candidate_cannot_reach_the_auditors_memory(
    tmp_path: Path,
) -> None:
    report = _audit(_copy(tmp_path), "tells_the_auditor")
    # it cannot reach the auditor, so it behaves as it would in a real job: wrongly
    assert report.verdict == "FAIL"
    assert any(f.check == "numerics" for f in report.failures)


@confined
def test_what_a_candidate_starts_ends_with_its_audit(tmp_path: Path) -> None:
    report = _audit(_copy(tmp_path), "outlives_the_audit")
    assert report.verdict == "PASS"
    assert survivors_after("kernelaudit-redteam-survivor") == []


def _hoard_fails_for_memory(tmp_path: Path, candidate: str, token: str) -> None:
    """The candidate's 2 GiB hoard counts against a 1.5 GiB limit (the worker alone holds well
    under it): a FAIL for memory, and no process of the hoard outlives the audit."""
    root = _copy(tmp_path)
    problem = load_problem(root / "problem" / "double.py")
    spec = f"{root / 'candidates' / candidate}.py::double"
    profile = replace(PROFILES["quick"], host_memory_bytes=3 << 29)
    report = audit(problem, spec, profile, "cpu", ["numerics", "execution"])
    assert report.verdict == "FAIL"
    (memory,) = [f for f in report.failures if f.key == "memory:"]
    assert "GiB of host memory, more than the limit of 1.50 GiB" in memory.title
    assert survivors_after(token) == []


@confined
def test_memory_held_by_a_process_that_left_the_workers_group_counts(tmp_path: Path) -> None:
    # the hoard in a session of its own
    _hoard_fails_for_memory(tmp_path, "hides_its_memory", "kernelaudit-redteam-hoard")


def _can_forbid_user_namespaces() -> bool:
    """Whether the bubblewrap here has `--disable-userns` (0.8 and later), runs unprivileged,
    and makes a user namespace here: asked of bubblewrap itself, not of the code under test."""
    wrapper = shutil.which("bwrap")
    if wrapper is None or os.stat(wrapper).st_mode & 0o4000:
        return False
    trial = [wrapper, "--unshare-user", "--disable-userns", "--ro-bind", "/", "/", "true"]
    try:
        said = subprocess.run([wrapper, "--help"], capture_output=True, text=True, timeout=20)
        if "--disable-userns" not in said.stdout + said.stderr:
            return False
        return subprocess.run(trial, capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


forbids = pytest.mark.skipif(
    not _can_forbid_user_namespaces(),
    reason="this bubblewrap cannot forbid user namespaces (older than 0.8, or setuid)",
)


@confined
@forbids
def test_memory_held_in_a_namespace_the_candidate_made_counts(tmp_path: Path) -> None:
    # the hoard in a session and a user and process-id namespace of its own
    _hoard_fails_for_memory(
        tmp_path, "hides_its_memory_in_a_namespace", "kernelaudit-redteam-nested-hoard"
    )


_MAKES_A_USER_NAMESPACE = (
    "import ctypes, os\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "made = libc.unshare(0x10000000) == 0\n"  # CLONE_NEWUSER
    "print('made' if made else os.strerror(ctypes.get_errno()))\n"
)


def _confined_output(script: str) -> str:
    """What a confined Python process running `script` prints."""
    return subprocess.run(
        sandbox.confine([sys.executable, "-c", script]),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


@confined
@forbids
def test_a_confined_process_cannot_make_a_user_namespace_of_its_own() -> None:
    said = _confined_output(_MAKES_A_USER_NAMESPACE).strip()
    assert said != "made" and said


@confined
def test_where_bubblewrap_cannot_forbid_user_namespaces_every_report_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    takes = sandbox._takes
    monkeypatch.setattr(
        sandbox, "_takes", lambda w, option: option != "--disable-userns" and takes(w, option)
    )
    for cached in (sandbox.isolation, sandbox._forbids_user_namespaces):
        cached.cache_clear()
    try:
        found = sandbox.isolation()
        assert found.confined  # the sandbox holds otherwise
        assert found.describe().endswith(f"; {sandbox.NESTED_ALLOWED}")
        assert "--disable-userns" not in sandbox.confine([sys.executable, "-c", "pass"])
    finally:
        monkeypatch.undo()
        for cached in (sandbox.isolation, sandbox._forbids_user_namespaces):
            cached.cache_clear()
    assert sandbox.isolation().describe() == (
        "bubblewrap: private file system, process ids, user and network"
        if _can_forbid_user_namespaces()
        else f"bubblewrap: private file system, process ids, user and network; "
        f"{sandbox.NESTED_ALLOWED}"
    )


@confined
def test_a_candidate_cannot_signal_the_auditor(tmp_path: Path) -> None:
    began = time.monotonic()
    report = _audit(_copy(tmp_path), "signals_the_auditor")
    # this process (the auditor) was never stopped: the audit ended, and on time
    assert report.verdict == "PASS"
    assert time.monotonic() - began < 300
    assert os.getpid() not in _stopped()


def _stopped() -> list[int]:
    stopped = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "stat").read_text().split(") ")[1][0] == "T":
                stopped.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return stopped


def test_a_reply_announcing_more_than_the_outputs_can_fill_is_refused_unread(
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    report = _audit(_copy(tmp_path), "floods_the_channel")
    assert report.verdict == "FAIL"
    crashes = [f for f in report.failures if f.check == "execution"]
    assert crashes and "announced a reply of 8,589,934,592 bytes" in crashes[0].title
    # refused at once: the auditor neither allocated 8 GiB nor waited for them
    assert time.monotonic() - began < 120


def test_a_reply_naming_a_place_past_the_shared_region_is_refused(tmp_path: Path) -> None:
    report = _audit(_copy(tmp_path), "forges_a_shared_place")
    assert report.verdict == "FAIL"
    crashes = [f for f in report.failures if f.check == "execution"]
    assert crashes and "runs past the region's" in crashes[0].title


def test_an_audit_says_how_its_candidates_were_confined(tmp_path: Path) -> None:
    report = _audit(_copy(tmp_path), "plants_files")
    assert report.isolation == isolation().describe()
    assert report.to_json()["isolation"] == report.isolation
    assert AuditReport.from_json(report.to_json()).isolation == report.isolation


def test_an_audit_started_from_a_candidates_file_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match='if __name__ == "__main__"'):
        _audit(_copy(tmp_path), "audits_at_import")


def test_a_candidate_looking_for_signs_of_its_audit_finds_none(tmp_path: Path) -> None:
    """Names, guard bands and poison values: none is a constant a candidate can look for, so
    one that computes correctly only when watched is judged on what it does unwatched."""
    report = _audit(_copy(tmp_path), "knows_it_is_watched")
    assert report.verdict == "FAIL"
    assert any(f.check == "numerics" for f in report.failures)


def test_nothing_in_a_candidates_environment_names_the_auditor() -> None:
    environment = child_environment("cpu")
    assert not [name for name, value in environment.items() if str(os.getpid()) == value]
    assert not [name for name in environment if "AUDITOR" in name]


@confined
def test_a_candidate_sees_the_hosts_name_as_a_plain_program_does() -> None:
    """The sandbox's own hostname (its UTS namespace) is the host's: a fixed name such as
    `localhost` would tell a candidate it runs confined."""
    shown = _confined_output("import socket; print(socket.gethostname())").strip()
    assert shown == socket.gethostname()


@confined
def test_a_candidate_runs_as_its_user_would_run_it_with_no_capability() -> None:
    """The sandbox's uid and gid are the auditor's own, as a plain program of this user sees
    them (a fixed uid would tell a candidate it runs confined), and it holds no capability,
    even where the auditor is root."""
    shown = subprocess.run(
        sandbox.confine(
            [
                sys.executable,
                "-c",
                "import os; print(os.getuid(), os.getgid()); "
                "print(open('/proc/self/status').read())",
            ]
        ),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    ids, _, status = shown.partition("\n")
    assert ids.split() == [str(os.getuid()), str(os.getgid())]
    held = {
        line.split(":")[0]: int(line.split()[1], 16)
        for line in status.splitlines()
        if line.startswith(("CapEff", "CapPrm", "CapBnd"))
    }
    assert held == {"CapEff": 0, "CapPrm": 0, "CapBnd": 0}


_SIZES = (
    "import os\n"
    "for folder in ('/tmp', '/dev/shm'):\n"
    "    found = os.statvfs(folder)\n"
    "    print(found.f_blocks * found.f_frsize)\n"
)


@confined
def test_a_candidates_memory_backed_folders_are_bounded() -> None:
    """/tmp and /dev/shm are memory that no worker's memory limit counts: a candidate that
    filled them would take the host's memory from the auditor. Each is bounded."""
    wrapper = shutil.which("bwrap") or "bwrap"
    if not sandbox._sizes_tmpfs(wrapper):
        pytest.skip("this bubblewrap cannot size a tmpfs (older than 0.7, or setuid)")
    shown = _confined_output(_SIZES).split()
    page = os.sysconf("SC_PAGE_SIZE")
    assert len(shown) == 2
    for size in map(int, shown):
        assert 0 < size <= sandbox.scratch_bytes() + page


@confined
def test_a_candidate_whose_cache_folder_stays_within_its_bound_passes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CACHE_MOST_BYTES", 1 << 30)  # its 80 MiB are well inside
    with _filling_its_cache(tmp_path) as (report, held):
        assert report.verdict == "PASS"
        assert held >= 8 << 20  # what it wrote is kept, as a compiler's cache is


@confined
def test_a_candidate_that_fills_its_cache_folder_is_stopped_and_the_folder_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CACHE_MOST_BYTES", 4 << 20)  # so 8 MiB a call is past it
    with _filling_its_cache(tmp_path) as (report, held):
        assert report.verdict == "FAIL"
        disk = [f for f in report.failures if f.key.startswith("disk:")]
        assert disk and "wrote more than 4 MiB to its cache folder" in disk[0].title
        # emptied when it went past; the calls of a restarted worker may write again until the
        # next look (unbounded, this audit's calls write 80 MiB)
        assert held <= 5 * (8 << 20)


@contextmanager
def _filling_its_cache(tmp_path: Path) -> Iterator[tuple[AuditReport, int]]:
    """An audit of `fills_the_disk` (8 MiB into its cache folder a call), and the bytes its
    cache folder holds after it; the folder removed afterwards."""
    root = _copy(tmp_path)
    report = _audit(root, "fills_the_disk")
    folder = sandbox.candidate_cache(root / "candidates" / "fills_the_disk.py")
    try:
        held, _ = limits.folder_held(str(folder), 1 << 40, 1 << 30)
        yield report, held
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@confined
def test_a_one_shot_child_that_fills_its_cache_folder_is_stopped_and_the_folder_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CACHE_MOST_BYTES", 4 << 20)
    candidate = _copy(tmp_path) / "candidates" / "fills_the_disk.py"
    fills = (
        "from pathlib import Path; import os, time; folder = Path.home() / '.cache'; "
        "folder.mkdir(parents=True, exist_ok=True); "
        "[(folder / f'block-{k}').write_bytes(os.urandom(1 << 20)) for k in range(16)]; "
        "time.sleep(60)"
    )
    began = time.monotonic()
    done = run_python(["-c", fills], "cpu", 120, candidate, tmp_path)
    assert time.monotonic() - began < 30  # stopped, not waited out
    assert "wrote more than 4 MiB to its cache folder" in done.over_disk
    folder = sandbox.candidate_cache(candidate)
    assert folder.is_dir() and list(folder.iterdir()) == []
    folder.rmdir()


@contextmanager
def _job_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Path, Path]]:
    """A candidate and a job folder the auditor put a request of 3 MiB in, the slack a job
    folder is held to cut to 2 MiB; the candidate's cache folder removed afterwards."""
    monkeypatch.setattr(sandbox, "JOB_FOLDER_SLACK", 2 << 20)
    candidate = _copy(tmp_path) / "candidates" / "fills_the_disk.py"
    job = tmp_path / "job"
    job.mkdir()
    (job / "request.bin").write_bytes(bytes(3 << 20))
    try:
        yield candidate, job
    finally:
        shutil.rmtree(sandbox.candidate_cache(candidate), ignore_errors=True)


@confined
def test_a_one_shot_child_that_fills_its_job_folder_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # its working folder lies in the host's temporary folder: held to what the auditor put
    # there, the result it may write and a slack, not to the disk's free space
    fills = (
        "import os, time; "
        "[open(f'block-{k}', 'wb').write(os.urandom(1 << 20)) for k in range(16)]; "
        "time.sleep(60)"
    )
    began = time.monotonic()
    with _job_folder(tmp_path, monkeypatch) as (candidate, job):
        # 3 MiB given, a result of 2 MiB and the slack of 2 MiB
        done = run_python(["-c", fills], "cpu", 120, candidate, job, result_bytes=2 << 20)
    assert time.monotonic() - began < 30  # stopped, not waited out
    assert "wrote more than 7 MiB to its job's folder" in done.over_disk
    assert done.failure(False, 120, "its")[0] == "disk"


@confined
def test_a_one_shot_child_writing_its_result_within_the_bound_is_not_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # and stays a while, looked at again and again
    writes = "import os, time; open('result.bin', 'wb').write(os.urandom(6 << 20)); time.sleep(1)"
    with _job_folder(tmp_path, monkeypatch) as (candidate, job):
        done = run_python(["-c", writes], "cpu", 120, candidate, job, result_bytes=6 << 20)
    assert (done.returncode, done.over_disk) == (0, "")
    assert (job / "result.bin").stat().st_size == 6 << 20
