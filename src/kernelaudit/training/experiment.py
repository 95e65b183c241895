"""The training check's experiment: the reference, its perturbations and the candidate,
each trained with SGD and with AdamW from the same start on the same tokens, and each shadowing
the reference's trajectory (`shadow.shadow`).

Every run, the candidate's included, trains here, in the auditor: the model, the optimizers,
the losses and the drift never enter the candidate's process, which only answers the calls of
the plugged slot (`channel.CandidateProcess`). The reference's runs (trusted, and shared by
every candidate of a problem) go on in this thread while the candidate's runs go on in another,
so the candidate's kernel computes while the reference's runs do. The perturbed runs shadow the
reference's trajectory together (`shadow.shadow_all`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelaudit.inputs.case import dtype_name
from kernelaudit.problem.spec import IndexInput, Problem, TensorInput
from kernelaudit.profiles import training_steps
from kernelaudit.runner.candidate import CandidateRef
from kernelaudit.training import kept
from kernelaudit.training.channel import CandidateProcess
from kernelaudit.training.data import batches, token_counts, token_stream
from kernelaudit.training.envelope import Judgement, conclusion, judge
from kernelaudit.training.loop import (
    OPTIMIZERS,
    Biased,
    Experiment,
    Native,
    Perturbed,
    Rounded,
    Trajectory,
    biased_member,
    train,
)
from kernelaudit.training.shadow import Shadowed, shadow, shadow_all
from kernelaudit.training.slots import Plug

STREAM_TOKENS = 1 << 20
"""Tokens in the synthetic stream every run's batches are cut from."""
_CURVE_POINTS = 120
"""Points kept per curve in a report."""

_HOT_SHARE = 100
"""The most frequent 1/_HOT_SHARE of the vocabulary (at least one token) are the hot rows."""

_references: dict[tuple[Any, ...], dict[str, kept.Envelope]] = {}
"""Reference, perturbed and shadowing runs by (problem, configuration, experiment, device): every
candidate of a problem is compared with the same ones."""
_origins: dict[tuple[Any, ...], str] = {}
"""Where each of `_references` came from, as the report says it: made by the audit that made
them (and kept on disk for the next, or why not), or read from the disk (`kept`)."""
_EARLIER = "made by an earlier audit in this process"


@dataclass(frozen=True)
class Outcome:
    """One dtype configuration's experiment, judged."""

    dtypes: str
    judgements: tuple[Judgement, ...]
    curves: dict[str, dict[str, list[float]]]
    """Per optimizer: "reference", "candidate" and "envelope" (the largest loss gap of a
    perturbed run at each step), thinned to at most `_CURVE_POINTS` steps, plus "steps"."""
    rows: list[dict[str, Any]]
    """The embedding rows whose updates drift furthest from the reference's (for the optimizer
    that departs most), with their drift in envelopes and how often their tokens occur."""
    conclusion: str
    seconds: float
    error: str = ""
    parts: dict[str, float] = field(default_factory=dict)
    """Seconds of the reference's runs (next to none where an earlier candidate of the problem
    made them, or they were read from the disk) and of the candidate's, which go on side by
    side."""
    reference_runs: str = ""
    """Where the reference's runs came from: made by this audit (kept on disk for the next, or
    why not), by an earlier audit in this process, or kept on disk by an earlier one (`kept`),
    and where they are kept."""


def slot_dtypes(problem: Problem, config: int) -> tuple[torch.dtype | None, ...]:
    """The dtype each slot argument is cast to: the problem's inputs in that configuration."""
    dtypes = problem.dtype_configs()[config]
    return tuple(
        dtypes[i.name] if isinstance(i, (TensorInput, IndexInput)) else None for i in problem.inputs
    )


def run_experiment(
    problem: Problem,
    candidate: CandidateRef,
    config: int,
    experiment: Experiment,
    device: str,
    timeout_s: float,
) -> Outcome:
    began = time.perf_counter()
    dtypes = slot_dtypes(problem, config)
    stream = token_stream(experiment.config.vocab, STREAM_TOKENS, experiment.seed)
    tokens = batches(
        stream, experiment.batch, experiment.config.seq, experiment.steps, experiment.seed
    )
    label = "/".join(
        sorted({dtype_name(d) for d in dtypes if d is not None and d.is_floating_point})
    )
    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # tiny matmuls: threads cost more than they give
    try:
        with (
            CandidateProcess(candidate, problem.slot, device, timeout_s) as process,
            ThreadPoolExecutor(1, thread_name_prefix="kernelaudit-training") as pool,
        ):
            candidate_s: list[float] = []  # set in the candidate's thread before it returns

            def candidate_side() -> tuple[list[Trajectory], list[Shadowed], str]:
                began_side = time.perf_counter()
                try:
                    return _candidate_runs(problem, process, dtypes, experiment, tokens, device)
                finally:
                    candidate_s.append(time.perf_counter() - began_side)

            side = pool.submit(candidate_side)

            # Once the candidate's runs are done, the reference's stop at what judging them
            # still needs.
            def wanted() -> str:
                if not side.done():
                    return "all"
                if side.exception() is not None or side.result()[2]:
                    return "none"  # it could not train at all
                runs, shadows, _ = side.result()
                # every run stopped: the reference's own runs still tell whether it stops too
                return "plain" if all(r.error for r in (*runs, *shadows)) else "all"

            began_reference = time.perf_counter()
            key = _reference_key(problem, config, experiment, device)
            made_before = key in _references
            references = _reference_runs(
                problem, config, dtypes, experiment, tokens, device, wanted
            )
            reference_s = time.perf_counter() - began_reference
            # cut short, they are neither kept in this process nor on disk
            origin = _origins.get(key, "made by this audit, in part (not kept)")
            if made_before and origin.startswith("made by this audit"):
                origin = _EARLIER
            runs, shadows, error = side.result()
    finally:
        torch.set_num_threads(threads)
    parts = {"reference's runs": reference_s, "candidate's runs": candidate_s[0]}
    if error:
        seconds = time.perf_counter() - began
        return Outcome(label, (), {}, [], error, seconds, error, parts, origin)
    assert references is not None, "only a candidate that could not train stops them all"
    counts = token_counts(tokens, experiment.config.vocab)
    hot = torch.topk(counts, max(1, experiment.config.vocab // _HOT_SHARE)).indices
    judgements = []
    curves: dict[str, dict[str, list[float]]] = {}
    # the loss is judged only in runs as long as the device's usual (Judgement.loss_judged)
    judge_loss = experiment.steps >= training_steps(device)
    for run, shadowed in zip(runs, shadows, strict=True):
        reference, perturbed, envelope = references[run.optimizer]
        judgements.append(
            judge(reference, perturbed, run, envelope, shadowed, {"embedding": hot}, judge_loss)
        )
        curves[run.optimizer] = _curves(reference, perturbed, run)
    worst = max(judgements, key=lambda j: (j.departs, j.drift_ratio))
    return Outcome(
        label,
        tuple(judgements),
        curves,
        _rows(worst, counts),
        conclusion(judgements),
        time.perf_counter() - began,
        parts=parts,
        reference_runs=origin,
    )


def _reference_runs(
    problem: Problem,
    config: int,
    dtypes: tuple[torch.dtype | None, ...],
    experiment: Experiment,
    tokens: torch.Tensor,
    device: str,
    wanted: Callable[[], str] = lambda: "all",
) -> dict[str, kept.Envelope] | None:
    """The reference's runs for every optimizer: those an earlier candidate of the problem had
    made in this process, else those kept on disk by an earlier audit (`kept`), else made now
    (and kept). `wanted()`, asked before each run, may cut them short: "plain" keeps only the
    reference's own run per optimizer (no envelope), "none" returns None. Only a whole set is
    kept."""
    key = _reference_key(problem, config, experiment, device)
    if key in _references:
        return _references[key]
    kept_as = kept.name_for(problem, config, dtypes, experiment, tokens, device)
    found = kept.load(kept_as)
    if found is not None:
        place = kept.place_of(kept_as)
        _references[key], _origins[key] = found, f"kept on disk by an earlier audit ({place})"
        return found
    plain = Plug(problem.slot, Native(problem.reference), dtypes)
    references = {}
    for optimizer in OPTIMIZERS:
        if wanted() == "none":
            return None
        references[optimizer] = train(experiment, optimizer, plain, tokens, device)
    runs: dict[str, kept.Envelope] = {}
    for optimizer in OPTIMIZERS:
        nudged = [
            Plug(problem.slot, Perturbed(problem.reference, seed), dtypes)
            for seed in range(1, experiment.perturbed_runs + 1)
        ]
        if biased_member(_result_dtypes(problem, config)):
            nudged.append(Plug(problem.slot, Biased(problem.reference), dtypes))
        perturbed = []
        for plug in nudged:
            if wanted() != "all":
                break
            perturbed.append(train(experiment, optimizer, plug, tokens, device))
        if wanted() != "all":  # it never turns back to "all" once the candidate is back
            return {o: (r, [], []) for o, r in references.items()}
        # drift is measured from the correctly rounded slot; the native reference is one
        # more correct kernel of the envelope
        centre = Plug(problem.slot, Rounded(problem.reference), dtypes)
        shadows = shadow_all(experiment, optimizer, centre, (*nudged, plain), tokens, device)
        runs[optimizer] = (references[optimizer], perturbed, shadows)
    why_not = kept.keep(kept_as, runs)
    origin = f"made by this audit, kept for the next ({kept.place_of(kept_as)})"
    _references[key] = runs
    _origins[key] = f"made by this audit (not kept: {why_not})" if why_not else origin
    return runs


def _reference_key(
    problem: Problem, config: int, experiment: Experiment, device: str
) -> tuple[Any, ...]:
    return (problem.source or problem.name, problem.slot, config, experiment, device)


def _result_dtypes(problem: Problem, config: int) -> list[torch.dtype]:
    dtypes = problem.dtype_configs()[config]
    return [problem.output_dtype(o, dtypes) for o in problem.outputs]


def _candidate_runs(
    problem: Problem,
    process: CandidateProcess,
    dtypes: tuple[torch.dtype | None, ...],
    experiment: Experiment,
    tokens: torch.Tensor,
    device: str,
) -> tuple[list[Trajectory], list[Shadowed], str]:
    """Per optimizer, the candidate's free-running run and its shadow of the correctly rounded
    slot's trajectory, each call of its slot answered by `process`; or why it could not train."""
    failed = process.ready()
    if failed:
        return [], [], failed
    plug = Plug(problem.slot, process, dtypes)
    centre = Plug(problem.slot, Rounded(problem.reference), dtypes)
    runs, shadows = [], []
    for optimizer in OPTIMIZERS:
        runs.append(train(experiment, optimizer, plug, tokens, device))
        shadows.append(shadow(experiment, optimizer, centre, plug, tokens, device))
        if process.stopped:  # it can answer no more: a timeout, a death, a forged answer
            return [], [], process.stopped
    for run in (*runs, *shadows):
        if not run.error and run.slot_calls == 0:
            never = f"the candidate never ran in slot {problem.slot!r} under {run.optimizer}"
            return [], [], never
    return runs, shadows, ""


def _thin(values: list[float], steps: list[int]) -> list[float]:
    return [values[s] for s in steps if s < len(values)]


def _curves(
    reference: Trajectory, perturbed: list[Trajectory], candidate: Trajectory
) -> dict[str, list[float]]:
    count = len(reference.losses)
    stride = max(1, -(-count // _CURVE_POINTS))
    steps = list(range(0, count, stride))
    if steps and steps[-1] != count - 1:
        steps.append(count - 1)
    envelope = [
        max(
            (abs(p.losses[s] - reference.losses[s]) for p in perturbed if s < len(p.losses)),
            default=0.0,
        )
        for s in range(count)
    ]
    gap = [abs(c - r) for c, r in zip(candidate.losses, reference.losses, strict=False)]
    return {
        "steps": [float(s) for s in steps],
        "reference": _thin(list(reference.losses), steps),
        "candidate": _thin(list(candidate.losses), steps),
        "gap": _thin(gap, steps),
        "envelope": _thin(envelope, steps),
    }


def _rows(judgement: Judgement, counts: torch.Tensor) -> list[dict[str, Any]]:
    embedding = next((d for d in judgement.drifts if d.parameter == "embedding"), None)
    if embedding is None:
        return []
    used = counts[counts > 0].float()
    median = float(used.median()) if used.numel() else 0.0
    return [
        {
            "row (token id)": row,
            "distance": float(f"{distance:.3g}"),
            "in envelopes": ratio,
            "token count": int(counts[row]),
            "times the median count": round(int(counts[row]) / median, 1) if median else None,
        }
        for row, distance, ratio in embedding.furthest_rows
        if distance > 0
    ]
