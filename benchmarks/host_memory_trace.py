"""The host memory of an audit and of every process it starts, read every `--every` seconds
from /proc until the command ends or `--limit` passes: per process its resident anonymous,
file-backed and shared memory, and the host's available and shared memory; the audit's
progress lines with the time they were printed. Run it where an audit is killed for memory
to see which process grows, and when.

    python benchmarks/host_memory_trace.py --out trace.json [--every 1] [--limit 170] -- \
        python3 -m kernelaudit check PROBLEM CANDIDATE --profile default --device cuda
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

_FIELDS = ("RssAnon", "RssFile", "RssShmem")
_GIB = float(1 << 30)


def _status(pid: int) -> dict[str, float] | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in _FIELDS:
            values[name] = round(int(rest.split()[0]) * 1024 / _GIB, 3)
    return values


def _parents() -> dict[int, int]:
    parents = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return parents


def _tree(root: int) -> list[int]:
    parents = _parents()
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for pid, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _name(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "?"
    return " ".join(w.decode(errors="replace") for w in words[:4])[:90]


def _meminfo() -> dict[str, float]:
    wanted = {"MemAvailable", "Shmem", "MemFree"}
    values = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in wanted:
            values[name] = round(int(rest.split()[0]) * 1024 / _GIB, 3)
    return values


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--limit", type=float, default=170.0)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    began = time.monotonic()
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    lines: list[tuple[float, str]] = []

    def read() -> None:
        assert process.stdout is not None
        for raw in process.stdout:
            lines.append((round(time.monotonic() - began, 1), raw.decode(errors="replace")))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    samples, names = [], {}
    while process.poll() is None and time.monotonic() - began < args.limit:
        row: dict[str, object] = {"t": round(time.monotonic() - began, 1), "host": _meminfo()}
        for pid in _tree(process.pid):
            status = _status(pid)
            if status:
                names.setdefault(pid, _name(pid))
                row[str(pid)] = status
        samples.append(row)
        time.sleep(args.every)
    code = process.poll()
    if code is None:
        os.killpg(process.pid, signal.SIGKILL)
        code = process.wait()
    reader.join(timeout=5)
    try:
        kernel = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10).stdout
        kernel = "\n".join(kernel.splitlines()[-40:])
    except (OSError, subprocess.SubprocessError) as error:
        kernel = f"dmesg: {error}"
    args.out.write_text(
        json.dumps(
            {
                "command": command,
                "exit_code": code,
                "seconds": round(time.monotonic() - began, 1),
                "processes": {str(k): v for k, v in names.items()},
                "samples": samples,
                "output": [f"[{t:7.1f}] {line.rstrip()}" for t, line in lines],
                "dmesg_tail": kernel,
            },
            indent=1,
        )
    )
    peak = max(samples, key=lambda s: -s["host"].get("MemAvailable", 0.0)) if samples else {}
    print(f"exit {code} after {time.monotonic() - began:.1f} s; least available: {peak}")


if __name__ == "__main__":
    main()
