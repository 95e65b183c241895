"""Where a worker's start goes: the steps `runner.worker.main.main` takes before it says it is
ready, repeated in a fresh process in the worker's order and timed one by one (Python and torch, the
device, the memory cap, the stream count, the state snapshots, the candidate's import, the
canary pattern), the wait for the auditor's first message left out. Not the worker itself:
no sandbox around it (which adds its own start, docs/benchmarks.md "The sandbox's cost"), no
canary drawn by an auditor, no page-locked arguments region, and the device memory capped at
half the device. Run it several times: the first run of a machine also pays the bytecode and
the driver's caches.

    python benchmarks/worker_start.py FILE::FUNCTION --device cuda --runs 3 --out start.json
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import time
from pathlib import Path

_STEPS = r"""
import sys, time, json
began = float(sys.argv[1])
marks = [("python started", time.time() - began)]
t = time.perf_counter()
def mark(name):
    global t
    now = time.perf_counter()
    marks.append((name, now - t))
    t = now
import torch
mark("import torch")
from kernelaudit.runner.worker import main as _worker
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.runner.boundary.guard import prepare
from kernelaudit.runner.boundary.memory import read_memory
from kernelaudit.runner.boundary.state import snapshot
from kernelaudit.runner.worker.watch import Watch
mark("import the worker")
device = torch.device(sys.argv[2])
if device.type == "cuda":
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.set_device(device)
    mark("set the device")
    _worker._limit_device_memory(device, torch.cuda.get_device_properties(device).total_memory // 2)
    mark("cap device memory")
watch = Watch()
if device.type == "cuda":
    watch.streams.install()
pristine = snapshot(device)
mark("snapshot before")
path, _, function = sys.argv[3].partition("::")
candidate = load_candidate(CandidateRef(path, function))
mark("import the candidate")
pristine.changes_to(snapshot(device))
mark("snapshot after")
if device.type == "cuda":
    prepare(device)
    read_memory(device)
    mark("canary and memory")
print(json.dumps(marks))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidate", help="FILE::FUNCTION")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    runs = []
    for _ in range(args.runs):
        began = time.time()
        done = subprocess.run(
            [sys.executable, "-c", _STEPS, repr(began), args.device, args.candidate],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        marks = json.loads(done.stdout.strip().splitlines()[-1])
        runs.append({"steps": dict(marks), "wall_s": round(time.time() - began, 3)})
        steps = " ".join(f"{name} {seconds:.2f}" for name, seconds in marks)
        print(steps, f"| {runs[-1]['wall_s']}")
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "candidate": args.candidate,
        "device": args.device,
        "python": platform.python_version(),
        "runs": runs,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
