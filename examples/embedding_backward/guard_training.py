"""The embedding example's kernels behind `kernelaudit.guard`, inside a training job.

The training check's decoder trains on a Zipf-distributed token stream with AdamW, its
embedding gradient computed by one of this example's Triton kernels, guarded against the
problem's reference. With fp16 gradients the kernel that accumulates in fp16 loses the sums
of the most frequent tokens' rows, while the loss curve looks healthy: the guard reports those
rows within the first steps. The kernel that accumulates in fp32 behind the same guard
reports nothing.

    python examples/embedding_backward/guard_training.py [--kernel wide_accumulator]
        [--steps 12] [--sample 0.01] [--records DIR] [--device cpu|cuda]

On a machine without a GPU the kernels run through Triton's interpreter and the model is the
training check's tiny one; on a GPU, its small one. Exit status 1 when the guard found a
failing call.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported

sys.path.insert(0, str(Path(__file__).resolve().parent))

import candidates
from problem import problem

import kernelaudit
from kernelaudit.guarding import Summary
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.loop import Experiment, Trajectory, train
from kernelaudit.training.slots import Plug

KERNELS = ("accumulate_in_low_precision", "wide_accumulator")

BATCH = {"cpu": 1024, "cuda": 256}
"""Sequences a step: on a CPU 16,384 tokens of the tiny model's 256 ids, so the most frequent
id takes about 1,700 of them a step (a real batch's most frequent tokens take thousands); on a
GPU 32,768 tokens of the small model's 8,192 ids."""


def guarded_training(
    kernel: str,
    device: str,
    steps: int,
    sample: float = 0.01,
    records: Path | None = None,
    optimizer: str = "adamw",
    batch: int = 0,
) -> tuple[Trajectory, Summary]:
    """Train `steps` steps with `kernel` (one of `KERNELS`) as the embedding gradient, behind
    a guard, `batch` sequences a step (0: `BATCH` for the device); the run and what the guard
    saw."""
    experiment = Experiment.for_device(device, steps=steps)
    experiment = replace(experiment, batch=batch or BATCH["cuda" if device != "cpu" else "cpu"])
    config = experiment.config
    stream = token_stream(config.vocab, 1 << 20, experiment.seed)
    tokens = batches(stream, experiment.batch, config.seq, steps, experiment.seed)
    fast = kernelaudit.guard(
        getattr(candidates, kernel), problem, sample=sample, records=records, name=kernel
    )
    # the model's gradients reach the kernel in fp16, where low-precision sums show
    plug = Plug("embedding_backward", fast, (torch.float16, None, None))
    trajectory = train(experiment, optimizer, plug, tokens, device)
    summary = fast.flush()
    fast.close()
    return trajectory, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernel", choices=KERNELS, default=KERNELS[0])
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--sample", type=float, default=0.01)
    parser.add_argument("--records", type=Path, default=None)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--batch", type=int, default=0, help="sequences a step (default: BATCH)")
    args = parser.parse_args()
    trajectory, summary = guarded_training(
        args.kernel, args.device, args.steps, args.sample, args.records, batch=args.batch
    )
    losses = trajectory.losses
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} over {len(losses)} steps (AdamW)")
    print(summary.describe())
    for failure in summary.failures[:3]:
        for name, row, count in failure.occurrences:
            print(f"  call {failure.verdict.call}: row {row} is the id of {count} tokens ({name})")
    return 1 if summary.failed else 0


if __name__ == "__main__":
    sys.exit(main())
