"""Judging a candidate's training against the natural envelope.

The envelope is what the reference's own runs do when every result of the slot is nudged by the
oracle's noise floor (one unit in the last place for bf16 and fp16), and what the reference does
as it runs natively: what any correct kernel that rounds differently may do. Two things are
judged against it, each in units of the envelope's largest value of the same kind:

- the loss: how far the candidate's free-running loss curve ends from the reference's;
- the parameter drift: along the correctly rounded slot's trajectory, the sum of the differences
  between the updates the candidate's gradients would make and the correctly rounded ones
  (`shadow.shadow`). Final
  parameters of free-running runs would not do: a few hundred steps amplify one ulp into a
  different trajectory, so every run, good or bad, ends about as far from the reference.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from kernelaudit.training.loop import Trajectory
from kernelaudit.training.shadow import Shadowed

LOSS_SLACK = 3.0
"""A loss gap over the last quarter (`tail_gap`) larger than this many envelopes is a departure,
in runs long enough for it to be judged (`Judgement.loss_judged`)."""

DRIFT_SLACK = 1.5
"""A parameter whose summed update difference is larger than this many envelopes departs.
Summed over steps, rounding noise averages out and a bias does not, so the envelope is tight:
leave-one-out runs of the envelope itself stay within 1.05 of the others (docs/benchmarks.md)."""

_TOP_ROWS = 5


@dataclass(frozen=True)
class Drift:
    """How far one parameter's updates strayed from the reference's, in the envelope's units."""

    parameter: str
    """A parameter's name, or "<name>[hot rows]" for the rows of the most frequent tokens."""
    ratio: float
    """The drift's norm over the envelope's largest (0 when neither moved)."""
    distance: float
    """The norm of the summed update differences."""
    envelope: float
    furthest_rows: tuple[tuple[int, float, float], ...] = ()
    """(row, distance, distance over that row's envelope) of the rows furthest off, furthest
    first: for a matrix whose rows are tokens, where an accumulation error concentrates."""


@dataclass(frozen=True)
class Judgement:
    """One optimizer's verdict."""

    optimizer: str
    loss_ratio: float
    """Median |candidate - reference| loss over the last quarter of steps, in envelopes."""
    loss_gap: float
    loss_envelope: float
    drifts: tuple[Drift, ...]
    """Worst first."""
    error: str = ""
    """Why the candidate's run stopped ("" when it finished)."""
    inconclusive: str = ""
    """Why nothing can be judged: the reference's own run stopped."""
    loss_judged: bool = True
    """False in runs shorter than the device's usual (the `quick` profile's): the loss gap is
    reported, not judged, and the parameter drift decides. A free-running run's loss level
    wanders for tens of steps after a spike of its own or of the reference's, and where such
    an excursion falls in a short run's last quarter is chaotic: at 100 steps on a GPU a
    correct kernel scored 6.17 envelopes (by the mean gap) and its buggy twin 4.72; at 200
    steps, 0.50 and 0.45 (docs/benchmarks.md)."""

    @property
    def drift_ratio(self) -> float:
        return max((d.ratio for d in self.drifts), default=0.0)

    @property
    def loss_departs(self) -> bool:
        if self.inconclusive:
            return False
        if self.error:
            return True
        return self.loss_judged and not self.loss_ratio <= LOSS_SLACK

    @property
    def parameters_depart(self) -> bool:
        if self.inconclusive:
            return False
        return bool(self.error) or not self.drift_ratio <= DRIFT_SLACK

    @property
    def departs(self) -> bool:
        return self.loss_departs or self.parameters_depart


def tail_gap(losses: Sequence[float], reference: Sequence[float]) -> float:
    """The median |loss - reference loss| over the last quarter of steps (of an even count, the
    lower of the two middle gaps).

    The median, not the mean: under SGD these small models' losses spike now and then (one
    step up to twice the loss), and where a spike falls is as chaotic as the rest of a
    free-running run; a single step's gap should not outweigh the rest of the quarter, while a
    kernel that changes how the model trains moves most of its steps. A spike also shifts a
    run's level for tens of steps, which no statistic of a short tail averages out: that is
    why a short run's loss is not judged at all (`Judgement.loss_judged`).
    """
    steps = min(len(losses), len(reference))
    if steps == 0:
        return float("inf")
    tail = max(steps // 4, 1)
    a = torch.tensor(losses[steps - tail : steps], dtype=torch.float64)
    b = torch.tensor(reference[steps - tail : steps], dtype=torch.float64)
    return float((a - b).abs().median())


def _rows(drift: torch.Tensor) -> torch.Tensor:
    return drift.reshape(drift.shape[0], -1).norm(dim=1)


def _drift(
    name: str, drift: torch.Tensor, envelopes: Sequence[torch.Tensor], by_rows: bool
) -> Drift:
    distance = float(drift.norm())
    envelope = max((float(e.norm()) for e in envelopes), default=0.0)
    ratio = distance / envelope if envelope > 0 else (float("inf") if distance > 0 else 0.0)
    furthest: tuple[tuple[int, float, float], ...] = ()
    if by_rows and drift.dim() == 2 and envelopes:
        rows = _rows(drift)
        bound = torch.stack([_rows(e) for e in envelopes]).amax(dim=0)
        # rows the envelope hardly moved are measured against its median row instead
        bound = bound.clamp_min(max(float(bound.median()), 1e-300))
        top = torch.topk(rows, min(_TOP_ROWS, rows.numel())).indices.tolist()
        furthest = tuple(
            (int(r), float(rows[r]), round(float(rows[r] / bound[r]), 3))
            for r in top
            if rows[r] > 0
        )
    return Drift(name, ratio, distance, envelope, furthest)


def judge(
    reference: Trajectory,
    perturbed: Sequence[Trajectory],
    candidate: Trajectory,
    shadows: Sequence[Shadowed],
    shadowed: Shadowed,
    token_rows: Mapping[str, torch.Tensor] | None = None,
    judge_loss: bool = True,
) -> Judgement:
    """The candidate against the reference, in units of the perturbed runs'.

    perturbed, shadows: the envelope's free-running and shadowing runs.
    candidate, shadowed: the candidate's.
    token_rows: for parameters whose rows are tokens (an embedding), the rows of the most
        frequent tokens: judged on their own too, so an error confined to them is not diluted
        by thousands of rare rows.
    judge_loss: False where the runs are too short for the loss to be judged
        (`Judgement.loss_judged`).
    """
    stopped = next((run.error for run in (reference, *perturbed, *shadows) if run.error), "")
    if stopped:
        return Judgement(
            candidate.optimizer, 0.0, 0.0, 0.0, (), inconclusive=f"the reference's run {stopped}"
        )
    scale = abs(sum(reference.losses) / max(len(reference.losses), 1))
    loss_envelope = max(
        max((tail_gap(p.losses, reference.losses) for p in perturbed), default=0.0),
        1e-7 * scale,
    )
    error = candidate.error or shadowed.error
    if error:
        infinite = float("inf")
        return Judgement(candidate.optimizer, infinite, infinite, loss_envelope, (), error)
    loss_gap = tail_gap(candidate.losses, reference.losses)
    token_rows = token_rows or {}
    drifts = []
    for name, drift in shadowed.drift.items():
        envelopes = [s.drift[name] for s in shadows]
        drifts.append(_drift(name, drift, envelopes, name in token_rows))
        if name in token_rows:
            hot = token_rows[name]
            hot_envelopes = [e[hot] for e in envelopes]
            drifts.append(_drift(f"{name}[hot rows]", drift[hot], hot_envelopes, False))
    drifts.sort(key=lambda d: -d.ratio)
    return Judgement(
        candidate.optimizer,
        loss_gap / loss_envelope,
        loss_gap,
        loss_envelope,
        tuple(drifts),
        loss_judged=judge_loss,
    )


def conclusion(judgements: Sequence[Judgement]) -> str:
    """What the runs mean, in plain words."""
    by_name = {j.optimizer: j for j in judgements}
    sgd, adamw = by_name.get("sgd"), by_name.get("adamw")
    parts = []
    for j in judgements:
        name = "SGD" if j.optimizer == "sgd" else "AdamW"
        if j.inconclusive:
            parts.append(f"Under {name} nothing can be judged: {j.inconclusive}.")
        elif j.error:
            parts.append(f"Under {name} the run stopped: {j.error}.")
        elif j.departs:
            judged = f"loss ends {j.loss_ratio:.1f}x and its " if j.loss_judged else ""
            parts.append(
                f"Under {name} the candidate's training departs from the reference's: its "
                f"{judged}parameter updates drift up to {j.drift_ratio:.1f}x as far as correct "
                f"kernels (the reference, and it rounded differently) take them "
                f"(worst: {j.drifts[0].parameter}){_unjudged(j)}."
            )
        elif j.loss_judged:
            parts.append(
                f"Under {name} it trains like the reference: loss {j.loss_ratio:.1f}x and "
                f"parameter updates {j.drift_ratio:.1f}x the envelope of correct kernels."
            )
        else:
            parts.append(
                f"Under {name} its parameter updates stay within {j.drift_ratio:.1f}x the "
                f"envelope of correct kernels{_unjudged(j)}."
            )
    # what looks healthy under AdamW: its loss where that is judged, else its updates
    masked = adamw is not None and (
        not adamw.loss_departs if adamw.loss_judged else not adamw.parameters_depart
    )
    if sgd is not None and adamw is not None and sgd.departs and masked:
        healthy = (
            f"the loss stays within {adamw.loss_ratio:.1f}x the envelope"
            if adamw.loss_judged
            else f"the parameter updates stay within {adamw.drift_ratio:.1f}x the envelope"
        )
        parts.append(
            f"AdamW masks the error: under AdamW {healthy}, because its per-parameter "
            "normalisation rescales every update whatever the gradient's size, while SGD, "
            "which follows the gradient as it is, shows the damage. A healthy AdamW run "
            "proves nothing about this kernel."
        )
    return " ".join(parts)


def _unjudged(judgement: Judgement) -> str:
    """What a conclusion adds about a loss the run was too short to judge ("" where judged)."""
    if judgement.loss_judged:
        return ""
    return f" (its loss, {judgement.loss_ratio:.1f}x, is not judged in runs this short)"
