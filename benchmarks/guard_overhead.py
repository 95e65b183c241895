"""What `kernelaudit.guard` costs a training job: the training check's decoder trained with the
embedding example's fp32-accumulating kernel as its embedding gradient, plain and behind a
guard (`sample` of the calls checked, every one of the first eight), alternating, the same
steps and batches each time. Per run: seconds per step over all steps, and the guard's
checks; the overhead is the ratio of the medians.

    python benchmarks/guard_overhead.py --out guard-overhead.json [--steps 200] [--sample 0.01]

On a GPU the small model (target: under 2% at sample=0.01); on a CPU the tiny one, the kernel
through Triton's interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "embedding_backward"
sys.path.insert(0, str(EXAMPLE))

import candidates  # noqa: E402
from guard_training import BATCH  # noqa: E402
from problem import problem  # noqa: E402

import kernelaudit  # noqa: E402
from kernelaudit.training.data import batches, token_stream  # noqa: E402
from kernelaudit.training.loop import Experiment, train  # noqa: E402
from kernelaudit.training.slots import Plug  # noqa: E402


def _run(experiment: Experiment, tokens: torch.Tensor, device: str, sample: float | None) -> dict:
    kernel = candidates.wide_accumulator
    fast = kernelaudit.guard(kernel, problem, sample=sample) if sample is not None else None
    plug = Plug("embedding_backward", fast or kernel, (torch.float16, None, None))
    if device != "cpu":
        torch.cuda.synchronize()
    began = time.perf_counter()
    trajectory = train(experiment, "adamw", plug, tokens, device)
    if device != "cpu":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - began
    row = {"guarded": fast is not None, "seconds": seconds, "steps": len(trajectory.losses)}
    if fast is not None:
        waited = time.perf_counter()
        summary = fast.flush()
        row |= {
            "checked": summary.checked,
            "failed": summary.failed,
            "behind": summary.behind,
            # how many steps (one embedding backward each) past its call a verdict came, at most
            "latest_steps": summary.latest,
            "slowest_check_s": summary.slowest,
            "wait_after_s": time.perf_counter() - waited,
        }
        fast.close()
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--sample", type=float, default=0.01)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = args.device
    experiment = Experiment.for_device(device, steps=args.steps)
    experiment = Experiment(
        experiment.config, args.steps, BATCH["cpu" if device == "cpu" else "cuda"]
    )
    config = experiment.config
    stream = token_stream(config.vocab, 1 << 20, experiment.seed)
    tokens = batches(stream, experiment.batch, config.seq, args.steps, experiment.seed)
    _run(experiment, tokens[:2], device, args.sample)  # warm-up: kernels compiled, caches made
    rows = []
    for _ in range(args.repeats):
        for sample in (None, args.sample):
            rows.append(_run(experiment, tokens, device, sample))
            print(json.dumps(rows[-1]), flush=True)
    plain = statistics.median(r["seconds"] for r in rows if not r["guarded"])
    guarded = statistics.median(r["seconds"] for r in rows if r["guarded"])
    summary = {
        "benchmark": "guard_overhead",
        "device": torch.cuda.get_device_name() if device != "cpu" else platform.machine(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "steps": args.steps,
        "batch": experiment.batch,
        "sample": args.sample,
        "plain_s_per_step": plain / args.steps,
        "guarded_s_per_step": guarded / args.steps,
        "overhead": guarded / plain - 1.0,
        "rows": rows,
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"overhead {100 * summary['overhead']:.2f}% at sample={args.sample}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
