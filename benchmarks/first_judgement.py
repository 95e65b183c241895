"""What an auditor's first comparison costs on a GPU, against its second: a fresh process
judges one result (`oracle.compare.compare`, the path every check's judging takes) and checks
it bit for bit (`runner.boundary.guard.same_bits`, the races check's), twice each, with and without
a comparison of a few elements first.

    python benchmarks/first_judgement.py [--warm] [--elements N] [--dtype bfloat16]

Each line is one step's wall seconds, synchronised. A first comparison much longer than the
second is paid once per process, whatever the size: kernels loaded on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch

from kernelaudit.oracle.compare import compare
from kernelaudit.runner.boundary.guard import same_bits


def _judged(elements: int, dtype: torch.dtype, device: torch.device) -> dict[str, float]:
    truth = torch.randn(elements // 1024, 1024, dtype=torch.float64, device=device)
    values = truth.to(dtype)
    baseline = truth.to(dtype)
    seconds: dict[str, float] = {}
    for step in ("compare", "compare again", "same_bits", "same_bits again"):
        torch.cuda.synchronize(device)
        began = time.perf_counter()
        if step.startswith("compare"):
            compare("output", values, truth, baseline, dtype, device=device)
        else:
            same_bits(values, baseline)
        torch.cuda.synchronize(device)
        seconds[step] = round(time.perf_counter() - began, 4)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", action="store_true", help="judge 1024 elements first")
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--dtype", default="bfloat16")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    dtype = getattr(torch, args.dtype)
    torch.ones(1, device=device)  # the context made before anything is timed
    record: dict[str, object] = {
        "warm": args.warm,
        "elements": args.elements,
        "CUDA_MODULE_LOADING": os.environ.get("CUDA_MODULE_LOADING", ""),
    }
    if args.warm:
        began = time.perf_counter()
        record["warm-up"] = _judged(1024, dtype, device)
        record["warm-up seconds"] = round(time.perf_counter() - began, 4)
    record["judged"] = _judged(args.elements, dtype, device)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
