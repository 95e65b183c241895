"""Run the training check's experiment for every bundled example wired to a slot, and time it.

    python benchmarks/training_check.py --device cuda --out training.json

For each example with `slot`, every candidate is trained under SGD and AdamW in every dtype
configuration the device can run, against the reference and its one-ulp perturbations. Prints
each verdict and conclusion and writes a JSON record (times, ratios, conclusions, versions,
device). The first candidate of a problem pays for the reference runs; later ones reuse them,
which is how an audit of several candidates runs too.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import environment, resolve_device
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.training.experiment import run_experiment
from kernelaudit.training.loop import Experiment


def experiment_record(
    experiment: Experiment, device: str, rows: list[dict[str, object]]
) -> dict[str, object]:
    """A benchmark's JSON record of the training experiment: date, device, versions, sizes."""
    return {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "environment": dict(environment(device)),
        "experiment": {
            "model": experiment.config.__dict__,
            "steps": experiment.steps,
            "batch": experiment.batch,
            "perturbed runs": experiment.perturbed_runs,
        },
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument("--configs", type=int, nargs="*", default=None, help="dtype configs")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--problems", nargs="*", default=None, help="only these problem names")
    parser.add_argument("--out", type=Path, default=Path("benchmark-training.json"))
    args = parser.parse_args()
    device = resolve_device(args.device)
    experiment = Experiment.for_device(device, args.steps)
    rows: list[dict[str, object]] = []
    record = experiment_record(experiment, device, rows)
    for example in load_examples(find_examples(args.examples)):
        problem = load_problem(example.problem)
        if not problem.slot or (args.problems and problem.name not in args.problems):
            continue
        candidate = parse_candidate(example.candidate)
        configs = args.configs or range(len(problem.dtype_configs()))
        for config in configs:
            began = time.perf_counter()
            outcome = run_experiment(problem, candidate, config, experiment, device, 3600.0)
            seconds = time.perf_counter() - began
            row = {
                "problem": problem.name,
                "candidate": candidate.function,
                "dtypes": outcome.dtypes,
                "seconds": round(seconds, 2),
                "error": outcome.error,
                "departs": {j.optimizer: j.departs for j in outcome.judgements},
                "loss ratio": {j.optimizer: round(j.loss_ratio, 3) for j in outcome.judgements},
                "drift ratio": {j.optimizer: round(j.drift_ratio, 3) for j in outcome.judgements},
                "rows": outcome.rows,
                "conclusion": outcome.conclusion,
            }
            rows.append(row)
            print(
                f"{problem.name:24} {candidate.function:28} {outcome.dtypes:9} "
                f"{seconds:7.1f} s  departs={row['departs']} {outcome.error}",
                flush=True,
            )
            print(f"    {outcome.conclusion}", flush=True)
            # written after every row, so an interrupted run keeps what it measured
            args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
