"""Where the training check's time goes: each kind of run of its experiment, timed alone.

    python benchmarks/training_parts.py --device cuda --problems cross_entropy_backward \
        --out parts.json [--profile parts-profile.txt]

For each bundled example wired to a slot (its first candidate, one dtype configuration), the
runs `training.experiment` makes are made one after another, each timed on the wall clock:
the reference's free-running run per optimizer, one perturbed run, the shadowing of the
correctly rounded slot by the perturbed runs and the native reference (`shadow_all`), the
candidate's free-running run and its shadow. `--profile` also writes cProfile's view of the
candidate's and the reference's runs (the top functions by cumulative and by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from training_check import experiment_record

from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import resolve_device
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.training.channel import CandidateProcess
from kernelaudit.training.data import batches, token_stream
from kernelaudit.training.experiment import STREAM_TOKENS, slot_dtypes
from kernelaudit.training.loop import OPTIMIZERS, Experiment, Native, Perturbed, Rounded, train
from kernelaudit.training.shadow import shadow, shadow_all
from kernelaudit.training.slots import Plug


@contextmanager
def _timed(parts: dict[str, float], name: str, device: str) -> Iterator[None]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    began = time.perf_counter()
    yield
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    parts[name] = round(parts.get(name, 0.0) + time.perf_counter() - began, 3)


def measure(problem, candidate, config: int, experiment: Experiment, device: str):  # type: ignore[no-untyped-def]
    dtypes = slot_dtypes(problem, config)
    stream = token_stream(experiment.config.vocab, STREAM_TOKENS, experiment.seed)
    tokens = batches(
        stream, experiment.batch, experiment.config.seq, experiment.steps, experiment.seed
    )
    parts: dict[str, float] = {}
    plain = Plug(problem.slot, Native(problem.reference), dtypes)
    centre = Plug(problem.slot, Rounded(problem.reference), dtypes)
    if device == "cpu":
        torch.set_num_threads(1)
    for optimizer in OPTIMIZERS:
        with _timed(parts, f"reference free run ({optimizer})", device):
            train(experiment, optimizer, plain, tokens, device)
        nudged = [
            Plug(problem.slot, Perturbed(problem.reference, seed), dtypes)
            for seed in range(1, experiment.perturbed_runs + 1)
        ]
        with _timed(parts, f"one perturbed free run ({optimizer})", device):
            train(experiment, optimizer, nudged[0], tokens, device)
        with _timed(parts, f"shadow_all of {len(nudged) + 1} ({optimizer})", device):
            shadow_all(experiment, optimizer, centre, (*nudged, plain), tokens, device)
    with CandidateProcess(candidate, problem.slot, device, 3600.0) as process:
        failed = process.ready()
        if failed:
            raise SystemExit(f"the candidate could not start: {failed}")
        plug = Plug(problem.slot, process, dtypes)
        for optimizer in OPTIMIZERS:
            with _timed(parts, f"candidate free run ({optimizer})", device):
                train(experiment, optimizer, plug, tokens, device)
            with _timed(parts, f"candidate shadow ({optimizer})", device):
                shadow(experiment, optimizer, centre, plug, tokens, device)
    perturbed = sum(v for k, v in parts.items() if k.startswith("one perturbed"))
    reference = sum(v for k, v in parts.items() if k.startswith(("reference", "shadow_all")))
    parts["the reference's side (free, perturbed x runs, shadows)"] = round(
        reference + experiment.perturbed_runs * perturbed, 3
    )
    parts["the candidate's side"] = round(
        sum(v for k, v in parts.items() if k.startswith("candidate")), 3
    )
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument("--config", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--length", type=float, default=1.0, help="the profile's share of steps")
    parser.add_argument("--problems", nargs="*", default=None, help="only these problem names")
    parser.add_argument("--out", type=Path, default=Path("training-parts.json"))
    parser.add_argument("--profile", type=Path, default=None)
    args = parser.parse_args()
    device = resolve_device(args.device)
    experiment = Experiment.for_device(device, args.steps, args.length)
    rows: list[dict[str, object]] = []
    profiler = cProfile.Profile() if args.profile else None
    seen = set()
    for example in load_examples(find_examples(args.examples)):
        problem = load_problem(example.problem)
        if not problem.slot or problem.name in seen:
            continue
        if args.problems and problem.name not in args.problems:
            continue
        seen.add(problem.name)
        candidate = parse_candidate(example.candidate)
        if profiler:
            profiler.enable()
        began = time.perf_counter()
        parts = measure(problem, candidate, args.config, experiment, device)
        if profiler:
            profiler.disable()
        row = {
            "problem": problem.name,
            "candidate": example.candidate,
            "seconds": round(time.perf_counter() - began, 2),
            "parts": parts,
        }
        print(json.dumps(row, indent=1), flush=True)
        rows.append(row)
    record = experiment_record(experiment, device, rows)
    args.out.write_text(json.dumps(record, indent=1))
    if profiler and args.profile:
        text = io.StringIO()
        stats = pstats.Stats(profiler, stream=text)
        stats.sort_stats("cumulative").print_stats(45)
        stats.sort_stats("tottime").print_stats(45)
        args.profile.write_text(text.getvalue())


if __name__ == "__main__":
    main()
