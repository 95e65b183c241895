"""What sending a host tensor to the GPU at float64 costs, the way the auditor sends a result to
be judged (`oracle.compare`) or a kept draw to be held there (`oracle.resident`): cast on the
host first, as `Tensor.to(device, torch.float64)` does, against sent at its own dtype and
widened on the device (`device_copies.moved`).

    python benchmarks/device_casts.py --out device-casts.json [--elements-m 32 256]

Sources in page-locked memory (the auditor's copies of a worker's results, `host_copies`) and
in pageable memory (a copy past the page-locked share); torch's threads set to `--threads`
(the auditor's share of a host's cores, `runner.auditor.limits`). Each case is timed `--repeats`
times after one warm-up, the device synchronised around each; the median is recorded.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch
from host_copies import median_s

from kernelaudit.device_copies import moved

DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--elements-m", type=int, nargs="+", default=[32, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device("cuda")
    rows = []
    for millions in args.elements_m:
        for dtype in DTYPES:
            for memory in ("page-locked", "pageable"):
                host = torch.empty(millions << 20, dtype=dtype, pin_memory=memory == "page-locked")
                host.copy_(torch.randn(host.shape, dtype=torch.float32))
                on_host = median_s(lambda h: h.to(device, torch.float64), host, args.repeats)
                on_device = median_s(lambda h: moved(h, device, torch.float64), host, args.repeats)
                row = {
                    "elements": host.numel(),
                    "dtype": str(dtype).removeprefix("torch."),
                    "memory": memory,
                    "cast_on_host_s": round(on_host, 5),
                    "cast_on_device_s": round(on_device, 5),
                    "speedup": round(on_host / on_device, 1),
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
                del host
    record = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "threads": args.threads,
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")


if __name__ == "__main__":
    main()
