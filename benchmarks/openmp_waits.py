"""What torch's element-wise operations cost back to back in one process, at three sizes: the
other side of letting idle OpenMP threads sleep soon (`runner.auditor.threads.WAIT_VARIABLES`). Run
it with and without the variable set, since OpenMP reads it when the process starts:

    python benchmarks/openmp_waits.py
    GOMP_SPINCOUNT=10000 python benchmarks/openmp_waits.py
"""

from __future__ import annotations

import os
import statistics
import time

import torch


def main() -> None:
    print("GOMP_SPINCOUNT", os.environ.get("GOMP_SPINCOUNT", "(libgomp's default)"))
    for elements in (1 << 16, 1 << 20, 1 << 22):
        x = torch.randn(elements)
        runs = []
        for _ in range(20):
            began = time.perf_counter()
            for _ in range(100):
                x * 2.0 + 1.0
            runs.append(time.perf_counter() - began)
        print(f"{elements:>9} elements: 100 operations in {statistics.median(runs) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
