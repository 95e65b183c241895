"""What copying a result from the GPU to the host costs, the way the auditor copies a case's
truth and baseline (`oracle.kept_results.copied_to_host`): into fresh pageable memory, as
`Tensor.to("cpu")` does, against page-locked memory from torch's caching host allocator, and
into fresh pageable memory through page-locked staging buffers (`host_copies.host_copy` where
no page-locked block may be had).

    python benchmarks/host_copies.py --out host-copies.json [--sizes-mib 1 64 1024 4096]

Each size is copied `--repeats` times after one warm-up copy, the destination freed in between
(as a case's copies are when it leaves the executor's cache); the median is recorded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelaudit.host_copies import host_copy

SIZES_MIB = (1, 8, 64, 256)


def _pageable(value: torch.Tensor) -> torch.Tensor:
    return value.to("cpu", copy=True)


def _page_locked(value: torch.Tensor) -> torch.Tensor:
    host = torch.empty_strided(value.size(), value.stride(), dtype=value.dtype, pin_memory=True)
    host.copy_(value)
    return host


def _staged(value: torch.Tensor) -> torch.Tensor:
    return host_copy(value, page_locked=False)


def median_s(
    copy: Callable[[torch.Tensor], torch.Tensor], value: torch.Tensor, repeats: int
) -> float:
    """The median seconds of `copy(value)` over `repeats` calls after one not counted, the
    device idle before each and waited for after it (a copy to the host is done when it
    returns; one to the device, or a cast there, only once the device is)."""
    copy(value)
    seconds = []
    for _ in range(repeats):
        torch.cuda.synchronize()
        began = time.perf_counter()
        made = copy(value)
        torch.cuda.synchronize()
        seconds.append(time.perf_counter() - began)
        del made
    return statistics.median(seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=list(SIZES_MIB))
    args = parser.parse_args()
    rows = []
    ways = (("pageable", _pageable), ("page-locked", _page_locked), ("staged", _staged))
    for mib in args.sizes_mib:
        value = torch.randn((mib << 20) // 8, dtype=torch.float64, device="cuda")
        row: dict[str, float] = {"MiB": mib}
        for name, copy in ways:
            seconds = median_s(copy, value, args.repeats)
            row[f"{name} ms"] = round(seconds * 1e3, 3)
            row[f"{name} GB/s"] = round((mib << 20) / seconds / 1e9, 2)
        rows.append(row)
        print(row, flush=True)
    record = {
        "what": "one float64 tensor copied from the GPU to the host, median of the repeats",
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "date": time.strftime("%Y-%m-%d"),
        "repeats": args.repeats,
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
