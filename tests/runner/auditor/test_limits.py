import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelaudit.runner.auditor import limits

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def hoarding(mib: int) -> subprocess.Popen[bytes]:
    """A process of a session of its own holding `mib` MiB, once `resident_bytes` counts
    three quarters of it."""
    hoard = f"x = b'x' * ({mib} << 20); import time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", hoard], start_new_session=True)
    deadline = time.monotonic() + 30
    while limits.resident_bytes(child.pid) < (mib * 3 // 4) << 20 and time.monotonic() < deadline:
        time.sleep(0.05)
    return child


def test_a_process_group_memory_is_counted_and_each_namespace_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    child = hoarding(256)
    try:
        assert limits.resident_bytes(child.pid) >= 192 << 20

        read = []
        real = os.readlink

        def counted(path: str, *args: object, **kwargs: object) -> str:
            read.append(path)
            return real(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "readlink", counted)
        limits.PROCESSES.forget()
        assert limits.resident_bytes(child.pid) >= 192 << 20
        # only this process's own link, and those of processes that started since
        assert f"/proc/{child.pid}/ns/pid" not in read
    finally:
        child.kill()
        child.wait()
    assert limits.resident_bytes(child.pid) == 0


def test_a_reused_pid_has_its_namespace_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["pid:[1]", "pid:[2]"])
    monkeypatch.setattr(limits, "_namespace", lambda pid: next(answers))
    table = limits.ProcessTable(fresh_s=0.1)
    seen: dict[tuple[str, int], str] = {}
    assert table._known("77", 100, seen) == "pid:[1]"
    table._namespaces = seen
    assert table._known("77", 100, {}) == "pid:[1]"  # the same process
    assert table._known("77", 250, {}) == "pid:[2]"  # another one, same pid


def test_waits_at_once_share_one_scan_and_a_new_process_is_seen_within_its_freshness(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scans = []
    real = os.scandir

    def counted(path: str) -> object:
        scans.append(path)
        return real(path)

    monkeypatch.setattr(os, "scandir", counted)
    table = limits.ProcessTable(fresh_s=0.5)
    monkeypatch.setattr(limits, "PROCESSES", table)
    limits.resident_bytes(os.getpid())
    waits = [threading.Thread(target=limits.resident_bytes, args=(os.getpid(),)) for _ in range(6)]
    for wait in waits:
        wait.start()
    for wait in waits:
        wait.join()
    assert scans == ["/proc"]  # seven waits, one scan

    child = hoarding(64)
    try:
        assert limits.resident_bytes(child.pid) >= 48 << 20
    finally:
        child.kill()
        child.wait()
    assert len(scans) >= 2


def test_a_cache_folder_past_its_bytes_or_files_is_told_and_emptied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "CACHE_WALK_S", 0.0)  # read the folder at every look
    bound = limits.FolderBound(tmp_path, most_bytes=1 << 20)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "kernels" / "small.bin").write_bytes(os.urandom(256 << 10))
    assert bound.over() == ""
    (tmp_path / "kernels" / "large.bin").write_bytes(os.urandom(2 << 20))
    assert "wrote more than 1 MiB to its cache folder" in bound.over()
    bound.empty()
    assert tmp_path.is_dir() and list(tmp_path.iterdir()) == []
    assert bound.over() == ""
    monkeypatch.setattr(limits, "CACHE_MOST_FILES", 50)
    for k in range(60):
        (tmp_path / f"empty-{k}").touch()
    assert "more than 50 files" in bound.over()


def test_a_cache_folder_is_read_only_when_its_disk_says_it_may_have_grown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    free = [10 << 30]
    monkeypatch.setattr(limits, "_free_bytes", lambda folder: free[0])
    walks = []
    real = limits.folder_held

    def counted(*args: object) -> tuple[int, int]:
        walks.append(args)
        return real(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(limits, "folder_held", counted)
    bound = limits.FolderBound(tmp_path, most_bytes=4 << 20)
    (tmp_path / "held.bin").write_bytes(os.urandom(1 << 20))
    walks.clear()
    free[0] -= 1 << 20  # within what the folder may still take: no read
    assert bound.over() == "" and walks == []
    (tmp_path / "more.bin").write_bytes(os.urandom(4 << 20))
    free[0] -= 4 << 20  # past it: read, and found over
    assert "wrote more than 4 MiB" in bound.over() and len(walks) == 1
    monkeypatch.setattr(limits, "CACHE_WALK_S", 0.0)
    free[0] += 64 << 30  # another process freed space: read all the same, in time
    assert "wrote more than 4 MiB" in bound.over()


def test_a_wait_empties_the_cache_folder_a_child_filled_with_files_and_keeps_a_job_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from kernelaudit.runner.auditor.launch import wait_then_end

    monkeypatch.setattr(limits, "CACHE_MOST_FILES", 50)
    cache, job = tmp_path / "cache", tmp_path / "job"
    cache.mkdir()
    job.mkdir()
    os.chmod(cache, 0o700)
    kept = limits.FolderBound(job, 1 << 30, "its job's folder", emptied=False)
    bound = limits.FolderBound(cache, 1 << 30)
    # a flood of empty files: few bytes, so only a read of the folder sees it
    made = f"Path({str(cache)!r}, f'e{{k}}').touch()"
    fills = f"from pathlib import Path; [{made} for k in range(60)]"
    child = subprocess.Popen(
        [sys.executable, "-c", f"{fills}; import time; time.sleep(60)"], start_new_session=True
    )
    (job / "result.bin").write_bytes(b"kept for its owner")
    waited = wait_then_end(child, time.monotonic() + 30, folders=(kept, bound))
    assert waited.full is bound and "more than 50 files" in waited.over_disk
    assert list(cache.iterdir()) == [] and (cache.stat().st_mode & 0o777) == 0o700
    assert (job / "result.bin").read_bytes() == b"kept for its owner"
