"""How long a child process that ran a candidate takes to end once its answer is written, ending
as Python ends (its modules torn down) and at once (`runner.boundary.ending.end_now`).

Each sample is a fresh process that imports what the interpreted bounds run imports, loads a
bundled example's candidate and calls it once (under Triton's interpreter on a CPU, compiled on
a GPU with `--device cuda`, as the large-tensor run and the training check's process call it),
then ends one way or the other; the parent times from the answer to the process's end.

    TRITON_INTERPRET=1 python benchmarks/child_exit.py [--rounds 5] [--json results/...json]
    python benchmarks/child_exit.py --device cuda [--rounds 5] [--json results/...json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

_CHILD = """
import sys
import torch
import kernelaudit.interpret.child  # what the bounds run imports
from kernelaudit.runner.boundary.ending import end_now
from kernelaudit.runner.candidate import CandidateRef, load_candidate

layernorm = load_candidate(CandidateRef(sys.argv[1], "masked_statistics"))
device = sys.argv[3]
x = torch.randn(64, 100, device=device)
layernorm(x, torch.randn(100, device=device), torch.randn(100, device=device), 1e-5)
if device == "cuda":
    torch.cuda.synchronize()
sys.stdout.write("answered\\n")
sys.stdout.flush()
if sys.argv[2] == "at-once":
    end_now(0)
"""

_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "layernorm" / "candidates.py"


def _ending_s(how: str, device: str) -> float:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(_EXAMPLE), how, device],
        stdout=subprocess.PIPE,
        env=env,
    )
    assert child.stdout is not None
    line = child.stdout.readline()
    answered = time.perf_counter()
    if line != b"answered\n":
        raise RuntimeError(f"the child did not answer: {line!r}")
    child.wait()
    return time.perf_counter() - answered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    samples: dict[str, list[float]] = {"as Python ends": [], "at-once": []}
    for _ in range(args.rounds):  # alternated, so that the host's drift falls on both
        for how in samples:
            samples[how].append(_ending_s(how, args.device))
    result = {
        "date": time.strftime("%Y-%m-%d"),
        "host": platform.node(),
        "cores": os.cpu_count(),
        "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        "torch": torch.__version__,
        "python": platform.python_version(),
        "interpreted": os.environ.get("TRITON_INTERPRET") == "1",
        "seconds from the answer to the end": samples,
        "medians": {how: round(statistics.median(s), 3) for how, s in samples.items()},
    }
    print(json.dumps(result["medians"]))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
