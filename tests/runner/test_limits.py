import os
import subprocess
import sys
import threading
import time

import pytest

from kernelaudit.runner import limits

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
