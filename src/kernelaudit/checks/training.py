"""The training check: plug the candidate into a small language model and train it.

For a problem wired to a slot of the model (`Problem.slot`), the reference and the candidate
each train the same model from the same start on the same Zipf-distributed tokens, with SGD and
with AdamW; the reference is also rerun with its slot results nudged by one ulp, which gives
the natural envelope. A candidate whose loss or parameters leave that envelope fails, and the
report says under which optimizer and which rows moved (see `kernelaudit.training`). Every run
trains in the auditor; the candidate's sandboxed process only answers its slot's calls
(`kernelaudit.training.channel`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from kernelaudit.checks.base import ConcludingOnly, Failure, PlanContext

if TYPE_CHECKING:
    from kernelaudit.training.envelope import Judgement
    from kernelaudit.training.experiment import Outcome
    from kernelaudit.training.loop import Experiment

_TIMEOUT_FACTOR = 10
"""The candidate's training runs may take this many times the profile's per-call timeout."""


class Training(ConcludingOnly):
    name: ClassVar[str] = "training"
    summary: ClassVar[str] = (
        "a candidate plugged into a small language model trains like the reference under SGD "
        "and AdamW, within the envelope of one-ulp perturbations"
    )

    def not_applicable(self, ctx: PlanContext) -> str:
        if ctx.problem.slot:
            return ""
        return "the problem plugs into no slot of the training model (Problem(slot=...))"

    def conclude(self, found: Sequence[tuple[str, Failure]]) -> list[Failure]:
        ctx = self.context
        if ctx is None or not ctx.problem.slot or ctx.candidate is None:
            return []
        # numerics and execution failures leave the question open: an error may be harmless
        # in training, and a candidate that raises only at extreme values (an overflow in
        # Triton's interpreter) may still train; one that always raises stops at once
        failed = {check for check, f in found if f.severity == "fail"}
        broken = sorted(failed - {"numerics", "execution"})
        if broken and not ctx.profile.train_broken:
            return [
                Failure(
                    key="training-skipped",
                    title=f"not trained: the candidate already fails {', '.join(broken)}; the "
                    f"{ctx.profile.name} profile trains only candidates whose failures, if any, "
                    "are numeric error or exceptions (run the default profile to train it "
                    "anyway)",
                    severity="note",
                )
            ]
        # imported here: the training model imports the oracle, which imports the checks
        from kernelaudit.training.experiment import run_experiment
        from kernelaudit.training.loop import Experiment

        count = ctx.profile.trained_configs(len(ctx.problem.dtype_configs()))
        experiment = Experiment.for_device(ctx.device, length=ctx.profile.training_length)
        failures = []
        for config in range(count):
            outcome = run_experiment(
                ctx.problem,
                ctx.candidate,
                config,
                experiment,
                ctx.device,
                ctx.profile.timeout_s * _TIMEOUT_FACTOR,
            )
            failures.append(_failure(outcome, experiment, ctx.problem.slot))
        return failures


def _failure(outcome: Outcome, experiment: Experiment, slot: str) -> Failure:
    setting = (
        f"{experiment.config.layers}-layer model, vocab {experiment.config.vocab}, "
        f"{experiment.steps} steps of {experiment.batch}x{experiment.config.seq} tokens, "
        f"slot {slot} in {outcome.dtypes}"
    )
    if outcome.error:
        return Failure(
            key=f"training-stopped:{outcome.dtypes}",
            title=f"the candidate could not train in slot {slot} ({outcome.dtypes}): "
            f"{outcome.error}",
            evidence=(("experiment", setting), ("message", outcome.error)),
        )
    departed = [j for j in outcome.judgements if j.departs]
    evidence: list[tuple[str, Any]] = [
        ("conclusion", outcome.conclusion),
        ("experiment", setting),
        (
            "per optimizer",
            {
                j.optimizer: {
                    "loss gap in envelopes": round(j.loss_ratio, 2),
                    "loss judged": j.loss_judged,
                    "largest parameter drift in envelopes": round(j.drift_ratio, 2),
                    "stopped": j.error or None,
                }
                for j in outcome.judgements
            },
        ),
        (
            "parameter drift",
            {
                j.optimizer: [
                    {"parameter": d.parameter, "in envelopes": round(d.ratio, 2)}
                    for d in j.drifts[:4]
                ]
                for j in outcome.judgements
            },
        ),
    ]
    if any(not j.loss_judged for j in outcome.judgements):
        evidence.append(
            (
                "loss",
                f"reported, not judged: {experiment.steps} steps are fewer than the device's "
                "usual, too few for free-running runs to settle; the parameter drift decides "
                "(runs of the usual length, the default profile's, judge it)",
            )
        )
    if outcome.rows:
        evidence.append(("rows that drift most", outcome.rows))
    evidence.append(("loss curves", outcome.curves))
    evidence.append(("seconds", round(outcome.seconds, 1)))
    evidence.append(("seconds by side", {k: round(v, 1) for k, v in outcome.parts.items()}))
    if outcome.reference_runs:
        evidence.append(("reference's runs", outcome.reference_runs))
    unjudged = [j for j in outcome.judgements if j.inconclusive]
    if unjudged and not departed:
        return Failure(
            key=f"training-inconclusive:{outcome.dtypes}",
            title=f"training in slot {slot} ({outcome.dtypes}) could not be judged under "
            f"{_names(unjudged)}: {unjudged[0].inconclusive}",
            evidence=tuple(evidence),
            severity="warn",
        )
    if not departed:
        return Failure(
            key=f"trains-within-envelope:{outcome.dtypes}",
            title=f"trains like the reference under SGD and AdamW in slot {slot} "
            f"({outcome.dtypes})",
            evidence=tuple(evidence),
            severity="note",
        )
    return Failure(
        key=f"departs:{'+'.join(j.optimizer for j in departed)}:{outcome.dtypes}",
        title=f"training departs from the reference under {_names(departed)} in slot {slot} "
        f"({outcome.dtypes})",
        evidence=tuple(evidence),
        score=max(max(j.loss_ratio if j.loss_judged else 0.0, j.drift_ratio) for j in departed),
    )


def _names(judgements: Sequence[Judgement]) -> str:
    return " and ".join("SGD" if j.optimizer == "sgd" else "AdamW" for j in judgements)
