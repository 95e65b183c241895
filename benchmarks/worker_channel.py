"""What a probe's round trip to the worker costs at each size of its tensors.

A worker is started on a candidate that adds one to its input (the work itself is one pass
over the tensor), and the same invocation is run again and again: one call whose input of
N MB goes to the worker and whose output of N MB comes back, as every numerics probe's does.
Reported per size: the median seconds of a run, and what the candidate's own work takes in
this process (the floor no channel can go under).

    python benchmarks/worker_channel.py --device cuda --out worker-channel.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.runner.messages import Call, Invocation, TensorArg
from kernelaudit.runner.process import Worker

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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="worker-channel-"))
    (folder / "candidate.py").write_text(_CANDIDATE)
    rows = []
    with Worker(CandidateRef(str(folder / "candidate.py"), "kernel"), args.device) as worker:
        worker.start()
        for megabytes in args.sizes:
            row = {
                "megabytes": megabytes,
                "run_s": round(_median_run(worker, megabytes, args.repeats), 4),
                "work_alone_s": round(_median_alone(args.device, megabytes, args.repeats), 4),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
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
