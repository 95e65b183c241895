"""How long one call of the layernorm example's candidate takes under Triton's interpreter, with
the interpreter's patching as it comes and made once (`kernelaudit.interpret.patches`), each in
a fresh process; and how many times the language's members were listed per call.

    TRITON_INTERPRET=1 python benchmarks/interpreter_patching.py [--rows 4096] [--hidden 1000]
        [--json results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

_ONE_SIDE = """
import inspect, json, sys, time
import torch
from kernelaudit.interpret import patches
from kernelaudit.runner.candidate import CandidateRef, load_candidate

rows, hidden, install = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "once"
layernorm = load_candidate(CandidateRef(sys.argv[4], "masked_statistics"))
if install:
    assert patches.install()
listed = inspect.getmembers
listings = []

def counting(*args, **kwargs):
    listings.append(1)
    return listed(*args, **kwargs)

inspect.getmembers = counting
torch.manual_seed(0)
x, weight, bias = torch.randn(rows, hidden), torch.randn(hidden), torch.randn(hidden)
layernorm(x, weight, bias, 1e-5)  # the first call reads and rewrites the kernel's source
listings.clear()
seconds = []
for _ in range(3):
    began = time.perf_counter()
    out = layernorm(x, weight, bias, 1e-5)
    seconds.append(time.perf_counter() - began)
print(json.dumps({"seconds": seconds, "listings_per_call": len(listings) / 3,
                  "checksum": float(out.double().sum())}))
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--hidden", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") != "1":
        print("set TRITON_INTERPRET=1: this measures Triton's interpreter", file=sys.stderr)
        return 2
    candidate = Path(__file__).resolve().parent.parent / "examples/layernorm/candidates.py"
    result: dict[str, object] = {"rows": args.rows, "hidden": args.hidden}
    for side in ("as it comes", "once", "as it comes", "once"):
        ran = subprocess.run(
            [
                sys.executable,
                "-c",
                _ONE_SIDE,
                str(args.rows),
                str(args.hidden),
                side.split()[0],
                str(candidate),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        measured = json.loads(ran.stdout.strip().splitlines()[-1])
        result.setdefault(side, []).append(measured)  # type: ignore[union-attr]
        best = min(measured["seconds"])
        print(f"{side:12} {best:.3f} s a call, {measured['listings_per_call']:.0f} listings a call")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
