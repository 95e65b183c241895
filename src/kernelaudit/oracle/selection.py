"""Integer results a reference chooses by comparing floats: the indices of a top-k, an argmax or
a sort, judged by the values they select.

Where two candidates' scores are closer than the reference's own precision can tell apart,
which one ranks first is decided by rounding: the float64 truth picks one, the reference at its
own precision may pick the other, and so may a correct kernel. The exact rule for integer
results fails any difference, and so failed correct kernels (and the references themselves) on
near ties. So the truth's run records every selection it makes (`recording`); an integer result
that is one of them (its values equal the recorded indices) is judged by what it selects: an
index that differs from the truth's is accepted where the truth's score at that index ties with
the truth's score at its own, within twice the error the reference at its native precision makes
in those scores (exact ties only where it makes none). Where the selection's order is
unspecified (`topk(sorted=False)`), only the scores selected count, each side in score order.
Where an earlier choice on the way hung on a near tie (a gate that first keeps its best groups
of experts, then masks the others: the other group's experts have no score the truth can
compare), the reference's own answer at its native precision is accepted for that slice too.
An index out of range, or repeated where the selection picks distinct ones, is never accepted.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

MOST_SCORES = 1 << 26
"""Selections over more elements than this keep the exact rule: their scores are not held."""
TIE_FACTOR = 2.0
"""How many times the reference's own error in the scores two selected scores may differ by."""


def _signature(names: tuple[str, ...], **defaults: object) -> inspect.Signature:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [
        inspect.Parameter(name, kind, default=defaults.get(name, inspect.Parameter.empty))
        for name in names
    ]
    parameters.append(inspect.Parameter("out", inspect.Parameter.KEYWORD_ONLY, default=None))
    return inspect.Signature(parameters)


_TOPK = _signature(("input", "k", "dim", "largest", "sorted"), dim=-1, largest=True, sorted=True)
_ARG = _signature(("input", "dim", "keepdim"), dim=None, keepdim=False)
_SORT = _signature(("input", "dim", "descending", "stable"), dim=-1, descending=False, stable=False)
_SIGNATURES = {
    "topk": _TOPK,
    "argmax": _ARG,
    "argmin": _ARG,
    "max": _ARG,
    "min": _ARG,
    "sort": _SORT,
    "argsort": _SORT,
}
_FUNCTIONS = {getattr(owner, name): name for name in _SIGNATURES for owner in (torch, torch.Tensor)}


@dataclass(frozen=True)
class Along:
    """How a selection's indices point into its scores."""

    dim: int
    keepdim: bool
    """Whether the indices keep `dim` (a top-k, a sort), or drop it (an argmax)."""
    distinct: bool
    """Whether the indices along `dim` are distinct (a top-k or a sort; not an argmax)."""
    ranked: bool
    """Whether their order along `dim` is by score (a sorted top-k, a sort), or unspecified
    (`topk(sorted=False)`): then only which scores they select is compared."""
    largest: bool
    """Whether the best score is the largest (the order a rank follows)."""
    picked: int = 1
    """How many indices each slice selects (1 for an argmax, all of them for a sort)."""


@dataclass(frozen=True)
class Chosen:
    """One selection a reference made: the values it compared and the indices it chose."""

    scores: torch.Tensor
    along: Along
    indices: torch.Tensor


@dataclass(frozen=True)
class Selection:
    """How one integer result is judged: the truth's scores it selects from, on the CPU."""

    scores: torch.Tensor
    along: Along
    tolerance: float
    """Scores closer than this tie: `TIE_FACTOR` times the reference's own largest error in
    them at its native precision (0: only exact ties)."""
    undecided: torch.Tensor | None = None
    """For each slice of the result (its shape without `dim`): whether a choice the reference
    made on the way to it hangs on a near tie (`_near_ties`), so that the reference's own
    answer at its native precision is as right as the truth's. None: no such choice."""


class _Recorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.chosen: list[Chosen] = []

    def __torch_function__(
        self,
        func: Callable[..., Any],
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = _FUNCTIONS.get(func)
        if name is not None:
            try:
                chosen = _chosen(name, args, kwargs, result)
            except Exception:  # watching must never break the reference's run
                chosen = None
            if chosen is not None:
                self.chosen.append(chosen)
        return result


def _chosen(name: str, args: tuple[Any, ...], kwargs: dict[str, Any], result: Any) -> Chosen | None:
    try:
        bound = _SIGNATURES[name].bind(*args, **kwargs)
    except TypeError:
        return None
    bound.apply_defaults()
    values, dim = bound.arguments["input"], bound.arguments["dim"]
    if not isinstance(values, torch.Tensor) or not values.is_floating_point():
        return None
    if name in ("max", "min") and not isinstance(dim, int):
        return None  # the largest value alone, or an elementwise maximum: no index chosen
    indices = result if name in ("argmax", "argmin", "argsort") else result[1]
    if not isinstance(indices, torch.Tensor) or values.numel() > MOST_SCORES:
        return None
    keepdim = bool(bound.arguments.get("keepdim", True))
    if dim is None:  # over the flattened values
        values, dim, keepdim = values.reshape(-1), 0, False
    largest = {
        "topk": bool(bound.arguments.get("largest")),
        "sort": bool(bound.arguments.get("descending")),
        "argsort": bool(bound.arguments.get("descending")),
    }.get(name, name in ("argmax", "max"))
    dim = int(dim) % max(values.dim(), 1)
    if name == "topk":
        picked = int(bound.arguments["k"])
    else:
        picked = values.shape[dim] if name in ("sort", "argsort") else 1
    along = Along(
        dim=dim,
        keepdim=keepdim,
        distinct=name in ("topk", "sort", "argsort"),
        ranked=name != "topk" or bool(bound.arguments.get("sorted")),
        largest=largest,
        picked=picked,
    )
    return Chosen(values.detach(), along, indices)


@contextmanager
def recording(wanted: bool = True) -> Iterator[list[Chosen]]:
    """Every selection the code run inside makes, in order (nothing, and no cost, unless
    `wanted`)."""
    if not wanted:
        yield []
        return
    recorder = _Recorder()
    with recorder:
        yield recorder.chosen


def matched(results: tuple[torch.Tensor, ...], chosen: list[Chosen]) -> tuple[int | None, ...]:
    """For each result, the position in `chosen` of the selection it is (the last one whose
    indices equal it, for integer results), or None."""
    found: list[int | None] = []
    for result in results:
        indices = not (result.is_floating_point() or result.is_complex())
        found.append(_source(result, chosen) if indices and result.dtype != torch.bool else None)
    return tuple(found)


def held(chosen: Chosen) -> Chosen:
    """`chosen` with its scores in float64 on the host and its indices dropped: what judging
    needs, holding nothing on the device."""
    scores = chosen.scores.to(device="cpu", dtype=torch.float64)
    return Chosen(scores, chosen.along, chosen.indices.new_empty(0, device="cpu"))


def selections(
    positions: tuple[int | None, ...], truth_chosen: list[Chosen], native_chosen: list[Chosen]
) -> tuple[Selection | None, ...]:
    """The selections of the results `matched` found (`truth_chosen`: every selection of the
    truth's run, as `held`), each with the tolerance the native run's selection at the same
    position gives (none where the two runs' selections differ in shape), and the slices where
    any selection of the run with the same slices hangs on a near tie."""
    gaps = [
        _near_ties(chosen, native_chosen[i] if i < len(native_chosen) else None)
        for i, chosen in enumerate(truth_chosen)
    ]
    found: list[Selection | None] = []
    for position in positions:
        if position is None:
            found.append(None)
            continue
        chosen = truth_chosen[position]
        native = native_chosen[position] if position < len(native_chosen) else None
        slices = _slices(chosen)
        undecided = [g for g in gaps if g is not None and g.shape == slices]
        found.append(
            Selection(
                chosen.scores,
                chosen.along,
                _tolerance(chosen.scores, native),
                torch.stack(undecided).any(dim=0) if undecided else None,
            )
        )
    return tuple(found)


def _slices(chosen: Chosen) -> torch.Size:
    shape = list(chosen.scores.shape)
    del shape[chosen.along.dim]
    return torch.Size(shape)


def _near_ties(chosen: Chosen, native: Chosen | None) -> torch.Tensor | None:
    """For each slice of `chosen`'s scores: whether what it selects hangs on a near tie, the
    last score it keeps and the first it leaves (or any two neighbours, for a sort) within the
    tolerance the native run gives; None where the native run made no such selection."""
    if native is None or native.scores.shape != chosen.scores.shape:
        return None
    along, tolerance = chosen.along, _tolerance(chosen.scores, native)
    size = chosen.scores.shape[along.dim]
    ordered = chosen.scores.sort(dim=along.dim, descending=along.largest).values
    if along.picked >= size:  # a whole sort: any two neighbours
        if size < 2:
            return None
        left = ordered.narrow(along.dim, 0, size - 1)
        right = ordered.narrow(along.dim, 1, size - 1)
        return _close(left, right, tolerance).any(dim=along.dim)
    kept = ordered.select(along.dim, along.picked - 1)
    left_out = ordered.select(along.dim, along.picked)
    return _close(kept, left_out, tolerance)


def _source(result: torch.Tensor, chosen: list[Chosen]) -> int | None:
    for position in reversed(range(len(chosen))):
        indices = chosen[position].indices
        if indices.shape == result.shape and torch.equal(
            indices.detach().to(device="cpu", dtype=torch.int64), result.to(torch.int64)
        ):
            return position
    return None


def _tolerance(truth: torch.Tensor, native: Chosen | None) -> float:
    if native is None or native.scores.shape != truth.shape:
        return 0.0
    error = (native.scores.to(device="cpu", dtype=torch.float64) - truth).abs()
    error = error[torch.isfinite(error)]
    return TIE_FACTOR * float(error.max()) if error.numel() else 0.0


def ties(
    values: torch.Tensor,
    truth: torch.Tensor,
    selection: Selection,
    baseline: torch.Tensor | None = None,
) -> torch.Tensor:
    """Where `values` differ from the truth's indices but select scores that tie with the
    truth's (see the module's docstring): True there, False everywhere else. Where the order
    is unspecified, a slice is accepted whole when its scores, each side in score order, tie
    rank by rank. A slice a near tie decided on the way (`Selection.undecided`) is accepted
    whole when it is the reference's own answer at its native precision (`baseline`)."""
    along = selection.along
    dim = along.dim
    scores = selection.scores.to(values.device)
    chosen, wanted = values.to(torch.int64), truth.to(values.device, torch.int64)
    if not along.keepdim:
        chosen, wanted = chosen.unsqueeze(dim), wanted.unsqueeze(dim)
    size = scores.shape[dim]
    valid = (chosen >= 0) & (chosen < size)
    picked = scores.gather(dim, chosen.clamp(0, size - 1))
    meant = scores.gather(dim, wanted.clamp(0, size - 1))
    if along.ranked:
        tied = _close(picked, meant, selection.tolerance) & valid
    else:
        best_first = along.largest
        picked = picked.sort(dim=dim, descending=best_first, stable=True).values
        meant = meant.sort(dim=dim, descending=best_first, stable=True).values
        whole = _close(picked, meant, selection.tolerance) & valid
        tied = whole.all(dim=dim, keepdim=True).expand_as(chosen)
    if along.distinct:
        ordered = chosen.sort(dim=dim).values
        repeated = (ordered.diff(dim=dim) == 0).any(dim=dim, keepdim=True)
        tied = tied & ~repeated
    if selection.undecided is not None and baseline is not None:
        native = baseline.to(values.device, torch.int64)
        native = native if along.keepdim else native.unsqueeze(dim)
        if along.ranked:
            same = (chosen == native).all(dim=dim, keepdim=True)
        else:  # the same indices, in any order
            ours, theirs = (t.sort(dim=dim).values for t in (chosen, native))
            same = (ours == theirs).all(dim=dim, keepdim=True)
        undecided = selection.undecided.to(values.device).unsqueeze(dim)
        tied = tied | (same & undecided).expand_as(chosen)
    tied = tied & (chosen != wanted)
    return tied if along.keepdim else tied.squeeze(dim)


def _close(a: torch.Tensor, b: torch.Tensor, tolerance: float) -> torch.Tensor:
    """Scores that tie: within `tolerance`, equal (infinities), or both NaN."""
    return ((a - b).abs() <= tolerance) | (a == b) | (torch.isnan(a) & torch.isnan(b))
