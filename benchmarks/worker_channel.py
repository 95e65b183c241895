"""What a probe's round trip to the worker costs at each size of its tensors.

A worker is started on a candidate that adds one to its input (the work itself is one pass
over the tensor), and the same invocation is run again and again: one call whose input of
N MB goes to the worker and whose output of N MB comes back, as every numerics probe's does.
Reported per size: the median seconds of a run, and what the candidate's own work takes in
this process (the floor no channel can go under).

    python benchmarks/worker_channel.py --device cuda --out worker-channel.json

With `--profile DIR`, the auditor's runs and the worker are profiled (cProfile; the sandbox
switched off so the worker can write its statistics) and their top functions written there.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

with contextlib.suppress(ImportError):  # the code measured may predate it
    from kernelaudit.runner.auditor.threads import settle_waits

    settle_waits()  # as the `kernelaudit` command does, before torch starts its threads

import torch

from kernelaudit.runner.auditor.process import Worker
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.candidate import CandidateRef

_CANDIDATE = "def kernel(x):\n    return x + 1\n"


def _median_run(worker: Worker, megabytes: int, repeats: int) -> float:
    values = torch.randn(megabytes * (1 << 20) // 4)
    invocation = Invocation(calls=(Call(args=(TensorArg(values),)),))
    worker.run(invocation)  # the first run of a size allocates what later ones reuse
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = worker.run(invocation)
        seconds.append(time.perf_counter() - started)
        assert not result.error, result.error
        assert torch.equal(result.calls[0].outputs[0], values + 1)
    return statistics.median(seconds)


def _median_alone(device: str, megabytes: int, repeats: int) -> float:
    values = torch.randn(megabytes * (1 << 20) // 4, device=device)
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        (values + 1).cpu()
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds)


def _top(stats: pstats.Stats) -> str:
    text = io.StringIO()
    stats.stream = text
    stats.sort_stats("cumulative").print_stats(30)
    stats.sort_stats("tottime").print_stats(20)
    return text.getvalue()


def _summarise(profiler: cProfile.Profile, folder: Path) -> None:
    """The auditor's and each worker's top functions, as text beside their statistics."""
    (folder / "auditor.txt").write_text(_top(pstats.Stats(profiler)))
    for stats_file in sorted(folder.glob("*.pstats")):
        stats_file.with_suffix(".txt").write_text(_top(pstats.Stats(str(stats_file))))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--profile", type=Path, help="profile into this folder")
    args = parser.parse_args()
    profiler = None
    if args.profile:
        args.profile.mkdir(parents=True, exist_ok=True)
        sys.path.insert(0, str(Path(__file__).parent))
        from profile_audit import _profile_children

        os.environ["KERNELAUDIT_SANDBOX"] = "off"
        _profile_children(args.profile)
        profiler = cProfile.Profile()
    folder = Path(tempfile.mkdtemp(prefix="worker-channel-"))
    (folder / "candidate.py").write_text(_CANDIDATE)
    rows = []
    with Worker(CandidateRef(str(folder / "candidate.py"), "kernel"), args.device) as worker:
        worker.start()
        if profiler is not None:
            profiler.enable()
        for megabytes in args.sizes:
            row = {
                "megabytes": megabytes,
                "run_s": round(_median_run(worker, megabytes, args.repeats), 4),
                "work_alone_s": round(_median_alone(args.device, megabytes, args.repeats), 4),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
        if profiler is not None:
            profiler.disable()
    if profiler is not None:
        _summarise(profiler, args.profile)
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "rows": rows,
    }
    if args.out:
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
