"""Where a training check's step goes: one slot call through the candidate's process against
the same call in the auditor, at the sizes the training check trains at on this device.

    python benchmarks/training_channel.py --device cuda --out channel.json

For each bundled example wired to a slot (its first candidate, its first dtype configuration),
one training step records the slot's arguments as the model passes them; then the candidate is
called on them `--calls` times in this process and through `training.channel.CandidateProcess`
(the way the training check calls it), and the model's step itself is timed with the
reference in the slot. Prints and writes milliseconds per call, the bytes each call moves and
what the check's runs would spend on the calls alone (`calls per experiment` x the per-call
time).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import time
from pathlib import Path
from typing import Any

import torch

from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import environment, resolve_device
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import load_candidate, parse_candidate
from kernelaudit.training.channel import CandidateProcess
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.experiment import slot_dtypes
from kernelaudit.training.loop import OPTIMIZERS, Experiment, Native, train
from kernelaudit.training.slots import Plug


class _Recorder:
    """The reference in the slot, keeping the arguments of its first call."""

    def __init__(self, function: Any) -> None:
        self.function = function
        self.arguments: tuple[Any, ...] | None = None
        self.calls = 0

    def __call__(self, *arguments: Any) -> Any:
        self.calls += 1
        if self.arguments is None:
            self.arguments = tuple(
                a.detach().clone() if isinstance(a, torch.Tensor) else a for a in arguments
            )
        return self.function(*arguments)


def _timed(call: Any, count: int, device: str) -> float:
    """Milliseconds per call, the first (warm-up) call not counted."""
    call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    for _ in range(count):
        call()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return 1000 * (time.perf_counter() - began) / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--out", type=Path, default=Path("benchmark-training-channel.json"))
    parser.add_argument(
        "--profile", type=Path, default=None, help="write the channel calls' cProfile here"
    )
    args = parser.parse_args()
    device = resolve_device(args.device)
    if device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # as the candidate's processes have it there
    experiment = Experiment.for_device(device)
    record: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "environment": dict(environment(device)),
        "experiment": {"model": experiment.config.__dict__, "steps": experiment.steps},
        "rows": [],
    }
    seen: set[str] = set()
    for example in load_examples(find_examples(args.examples)):
        problem = load_problem(example.problem)
        if not problem.slot or problem.name in seen:
            continue
        seen.add(problem.name)
        candidate = parse_candidate(example.candidate)
        dtypes = slot_dtypes(problem, 0)
        one = Experiment(experiment.config, steps=1, batch=experiment.batch)
        stream = token_stream(one.config.vocab, 1 << 20, one.seed)
        tokens = batches(stream, one.batch, one.config.seq, 1, one.seed)
        recorder = _Recorder(Native(problem.reference))
        began = time.perf_counter()
        train(one, OPTIMIZERS[0], Plug(problem.slot, recorder, dtypes), tokens, device)
        step_ms = 1000 * (time.perf_counter() - began)
        assert recorder.arguments is not None, f"{problem.name}: the slot never ran"
        arguments = tuple(
            a.to(d) if isinstance(a, torch.Tensor) and d is not None else a
            for a, d in zip(recorder.arguments, dtypes, strict=True)
        )
        moved = sum(a.numel() * a.element_size() for a in arguments if isinstance(a, torch.Tensor))
        kernel = load_candidate(candidate)
        direct = _timed(lambda: kernel(*arguments), args.calls, device)  # noqa: B023
        with CandidateProcess(candidate, problem.slot, device, 600.0) as process:
            failed = process.ready()
            assert not failed, failed
            channel = _timed(lambda: process(*arguments), args.calls, device)  # noqa: B023
            if args.profile is not None:
                with cProfile.Profile() as profiler:
                    _timed(lambda: process(*arguments), args.calls, device)  # noqa: B023
                with args.profile.open("a") as out:
                    out.write(f"\n== {problem.name} ==\n")
                    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
        # per optimizer, the free-running run and the shadow each call the slot as often a step
        # as the model uses it
        calls = recorder.calls * experiment.steps * 2 * len(OPTIMIZERS)
        row = {
            "problem": problem.name,
            "candidate": candidate.function,
            "slot": problem.slot,
            "argument bytes": moved,
            "slot calls per step": recorder.calls,
            "first step with the reference, ms": round(step_ms, 1),
            "in the auditor, ms per call": round(direct, 2),
            "through the channel, ms per call": round(channel, 2),
            "candidate's calls per experiment": calls,
            "channel seconds per experiment": round(calls * channel / 1000, 1),
        }
        record["rows"].append(row)
        print(json.dumps(row), flush=True)
        args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
