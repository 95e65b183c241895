"""The training check's judgement of given candidates of one bundled example, in one dtype
configuration, at a chosen number of steps.

    python benchmarks/training_verdicts.py cross_entropy_backward --config 1 --steps 60 \
        examples/cross_entropy_backward/candidates.py::fp32_softmax \
        benchmarks/candidates/float32_cross_entropy.py::softmax_in_bf16

Prints, per candidate and optimizer, the loss gap and the three parameters that drift furthest,
in envelopes, and whether it departs (the reference's runs are made once, for the first);
`--json PATH` also writes each outcome's figures and loss curves (thinned past 100 steps, as the
report keeps them; a ratio that is not finite written as null).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

from kernelaudit.engine.audit import resolve_device
from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import parse_candidate
from kernelaudit.training.experiment import run_experiment
from kernelaudit.training.loop import Experiment

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("example", help="a bundled example's folder name")
    parser.add_argument("candidates", nargs="+", help="path/file.py::function")
    parser.add_argument("--config", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--json", type=Path, help="also write each outcome's curves here")
    args = parser.parse_args()
    kept = []
    device = resolve_device(args.device)
    problem = load_problem(EXAMPLES / args.example / "problem.py")
    experiment = Experiment.for_device(device, args.steps)
    for spec in args.candidates:
        began = time.perf_counter()
        outcome = run_experiment(
            problem, parse_candidate(spec), args.config, experiment, device, 3600.0
        )
        print(
            f"{spec.rsplit('::')[-1]} ({outcome.dtypes}): {time.perf_counter() - began:.1f} s "
            f"{outcome.error}",
            flush=True,
        )
        for j in outcome.judgements:
            worst = ", ".join(f"{d.parameter} {d.ratio:.2f}" for d in j.drifts[:3])
            verdict = "departs" if j.departs else "within"
            print(f"  {j.optimizer}: loss {j.loss_ratio:.2f}, drift {worst}: {verdict}")
        kept.append(
            {
                "candidate": spec,
                "dtypes": outcome.dtypes,
                "steps": experiment.steps,
                "error": outcome.error or None,
                "loss ratios": {j.optimizer: _finite(j.loss_ratio) for j in outcome.judgements},
                "loss judged": {j.optimizer: j.loss_judged for j in outcome.judgements},
                "drift ratios": {j.optimizer: _finite(j.drift_ratio) for j in outcome.judgements},
                "curves": outcome.curves,
            }
        )
    if args.json is not None:
        args.json.write_text(json.dumps(kept, indent=1))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


if __name__ == "__main__":
    main()
