"""What judging one result costs: `oracle.compare.compare` of a candidate's result against its
float64 truth and the baseline, the baseline's side kept (`memo`) as an audit keeps it after the
first check, and each of its parts alone.

    python benchmarks/judging_passes.py --rows 4096 --cols 4096 --dtype float32 --device cpu
    python benchmarks/judging_passes.py --device cuda --out judging.json

The result is the truth rounded to the dtype with every element moved by up to two units in the
last place: what a correct kernel returns. Times are medians of `--repeats` runs, one thread
count (torch's) throughout.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelaudit.oracle.compare import compare
from kernelaudit.oracle.metrics import error_metrics
from kernelaudit.oracle.mismatches import nonfinite_pattern


def _seconds(run: Callable[[], object], repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        began = time.perf_counter()
        run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--cols", type=int, default=4096)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--device", default="cpu", help="where judging runs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()

    dtype = getattr(torch, args.dtype)
    generator = torch.Generator().manual_seed(0)
    truth = torch.randn(args.rows, args.cols, dtype=torch.float64, generator=generator)
    eps = torch.finfo(dtype).eps
    moved = truth * (1 + eps * torch.randint(-2, 3, truth.shape, generator=generator))
    values, baseline = moved.to(dtype), truth.to(dtype)
    where = torch.device(args.device)

    def judged(memo: dict | None) -> object:
        return compare(
            "out", values, truth, baseline, dtype, depth=args.cols, device=where, memo=memo
        )

    memo: dict = {}
    judged(memo)
    on_device = values.to(where, torch.float64), truth.to(where, torch.float64)
    no_overflow = torch.zeros(truth.shape, dtype=torch.bool, device=where)
    parts = {
        "compare, the baseline's side computed": lambda: judged(None),
        "compare, the baseline's side kept": lambda: judged(memo),
        "moving result and truth to the judging device in float64": lambda: (
            values.to(where, torch.float64),
            truth.to(where, torch.float64),
        ),
        "error_metrics": lambda: error_metrics(*on_device, dtype, args.cols),
        "nonfinite_pattern": lambda: nonfinite_pattern(
            *on_device, no_overflow, dtype, lambda: baseline
        ),
    }
    seconds = {name: _seconds(run, args.repeats, args.device) for name, run in parts.items()}
    record = {
        "shape": [args.rows, args.cols],
        "dtype": args.dtype,
        "device": torch.cuda.get_device_name(where)
        if where.type == "cuda"
        else platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "seconds": seconds,
    }
    for name, value in seconds.items():
        print(f"{value * 1e3:9.1f} ms  {name}")
    if args.out is not None:
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
