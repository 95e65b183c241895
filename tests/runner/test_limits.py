import os
import subprocess
import sys
import time

import pytest

from kernelaudit.runner import limits

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")


def test_a_process_group_memory_is_counted_and_each_namespace_read_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    hoard = "x = b'x' * (256 << 20); import time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", hoard], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while limits.resident_bytes(child.pid) < 200 << 20 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert limits.resident_bytes(child.pid) >= 200 << 20

        read = []
        real = os.readlink

        def counted(path: str, *args: object, **kwargs: object) -> str:
            read.append(path)
            return real(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "readlink", counted)
        assert limits.resident_bytes(child.pid) >= 200 << 20
        # only this process's own link, and those of processes that started since
        assert f"/proc/{child.pid}/ns/pid" not in read
    finally:
        child.kill()
        child.wait()
    assert limits.resident_bytes(child.pid) == 0


def test_a_reused_pid_has_its_namespace_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    answers = iter(["pid:[1]", "pid:[2]"])
    monkeypatch.setattr(limits, "_namespace", lambda pid: next(answers))
    monkeypatch.setattr(limits, "_NAMESPACES", {})
    seen: dict[tuple[str, int], str] = {}
    assert limits._known_namespace("77", 100, seen) == "pid:[1]"
    limits._NAMESPACES.update(seen)
    assert limits._known_namespace("77", 100, {}) == "pid:[1]"  # the same process
    assert limits._known_namespace("77", 250, {}) == "pid:[2]"  # another one, same pid
