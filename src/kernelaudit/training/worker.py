"""The candidate's side of a training experiment, in a process of its own.

`python -m kernelaudit.training.worker REQUEST RESULT` loads the candidate, plugs it into its
slot, and per optimizer trains once and shadows the reference's run once. Only plain values and
tensors come back (the auditor reads the result with `torch.load(weights_only=True)`), so a
candidate cannot smuggle objects into the auditor.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from kernelaudit.problem.load import load_problem
from kernelaudit.runner.candidate import CandidateRef, load_candidate
from kernelaudit.training.loop import Experiment, Rounded, shadow, train
from kernelaudit.training.slots import Plug


def main(argv: Sequence[str]) -> int:
    request_path, result_path = argv
    request = torch.load(request_path, weights_only=False)  # written by the auditor
    experiment: Experiment = request["experiment"]
    device: str = request["device"]
    if device == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: threads cost more than they give
    ref = CandidateRef(request["path"], request["function"])
    results: list[dict[str, object]] = []
    dtypes = tuple(request["dtypes"])
    # the reference first: the candidate's import must not see (or patch) it being loaded
    reference = load_problem(Path(request["problem"])).reference
    centre = Plug(request["slot"], Rounded(reference), dtypes)
    try:
        function = load_candidate(ref)
    except BaseException as error:
        message = f"loading {ref.label} failed: {type(error).__name__}: {error}"
        torch.save({"error": message, "runs": []}, result_path)
        return 0
    plug = Plug(request["slot"], function, dtypes)
    for optimizer in request["optimizers"]:
        run = train(experiment, optimizer, plug, request["tokens"], device)
        shadowed = shadow(experiment, optimizer, centre, plug, request["tokens"], device)
        results.append(
            {
                "optimizer": run.optimizer,
                "losses": list(run.losses),
                "parameters": dict(run.parameters),
                "slot_calls": run.slot_calls,
                "error": run.error,
                "drift": dict(shadowed.drift),
                "shadow_calls": shadowed.slot_calls,
                "shadow_error": shadowed.error,
            }
        )
    torch.save({"error": "", "runs": results}, result_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
