"""What drawing one large floating input costs, distribution by distribution, and whether
another version of the code draws the same bits.

    python benchmarks/draw_costs.py --elements 67108864 --dtype bfloat16 --out draws.json \\
        [--base build/base/src] [--only tiny heavy_tailed]

Each distribution is drawn once at the given size and dtype from a fixed seed
(`inputs.distributions.draw_float`, on this process's share of the cores) and timed on the
wall clock. With `--base`, the same draws are made by the code under that source folder, in a
process of its own, one after the other, and the record says, per distribution, whether the
two gave the same bits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

_DRAW = """
import hashlib, json, sys, time, torch
from kernelaudit.inputs.distributions import FLOAT_DISTRIBUTIONS, draw_float
elements, dtype, names = int(sys.argv[1]), getattr(torch, sys.argv[2]), sys.argv[3:]
found = {}
for name in names or list(FLOAT_DISTRIBUTIONS):
    generator = torch.Generator().manual_seed(1234)
    began = time.perf_counter()
    values = draw_float(name, (elements // 1024, 1024), dtype, generator)
    seconds = time.perf_counter() - began
    bits = values.view(torch.uint8) if values.dtype.itemsize == 1 else values.view(
        {2: torch.int16, 4: torch.int32, 8: torch.int64}[values.dtype.itemsize])
    digest = hashlib.sha256(bits.contiguous().numpy().tobytes()).hexdigest()[:16]
    found[name] = {"seconds": round(seconds, 3), "sha256": digest}
print(json.dumps(found))
"""


def draw_all(source: Path | None, elements: int, dtype: str, names: list[str]) -> dict:
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = f"{source}{os.pathsep}{env.get('PYTHONPATH', '')}"
    done = subprocess.run(
        [sys.executable, "-c", _DRAW, str(elements), dtype, *names],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 26)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--only", nargs="+", default=[])
    parser.add_argument("--base", type=Path, default=None, help="another version's src folder")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import torch  # here: the draws above run in processes of their own

    record: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "machine": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "torch": torch.__version__,
        "elements": args.elements,
        "dtype": args.dtype,
        "this": draw_all(None, args.elements, args.dtype, args.only),
    }
    if args.base is not None:
        record["base"] = draw_all(args.base.resolve(), args.elements, args.dtype, args.only)
        record["same_bits"] = {
            name: record["base"][name]["sha256"] == found["sha256"]
            for name, found in record["this"].items()
        }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    for name, found in record["this"].items():
        before = record.get("base", {}).get(name)
        shown = f"{found['seconds']:7.2f} s"
        if before is not None:
            same = "same bits" if record["same_bits"][name] else "DIFFERENT bits"
            shown = f"{before['seconds']:7.2f} s -> {shown}  {same}"
        print(f"{name:18s} {shown}")
    return 0 if all(record.get("same_bits", {}).values()) else 1


if __name__ == "__main__":
    sys.exit(main())
