"""One checked call of a guarded kernel, judged as an audit judges a case.

The reference runs twice on copies of the call's inputs: in float64 (the truth,
`oracle.promote`, switching nothing of the process's, so the job's other threads keep their
precision) and at the inputs' own dtypes (the baseline). Each of the kernel's outputs is then
judged by the oracle's rule (`oracle.compare`): its error against the baseline's and the
noise floor, an absolute budget, the pattern of non-finite values; where it fails on its
error, the case with every input moved by one rounding is asked too (`oracle.conditioning`),
so a result as good as its inputs' precision allows is not failed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from kernelaudit.oracle.compare import Comparison, compare
from kernelaudit.oracle.conditioning import Nudged, nudged
from kernelaudit.oracle.promote import in_float64


@dataclass(frozen=True)
class OutputVerdict:
    """One output of a checked call."""

    name: str
    passed: bool
    reason: str = ""
    """Why it failed, in the oracle's words ("" when it passed)."""
    failure: str = ""
    """The oracle's key: "error", "nan-where-finite", "mismatch", "shape", ..."""
    error_ratio: float = 0.0
    """The worst of its metrics' ratios to the baseline's error or the noise floor."""
    worst_row: int | None = None
    """The row (first index) where the error is largest, where the output has rows."""


@dataclass(frozen=True)
class CallVerdict:
    """What checking one call found."""

    call: int
    """The call's number among the guarded kernel's calls, from 1."""
    why: str
    """Why it was checked (`sampling`)."""
    outputs: tuple[OutputVerdict, ...]
    seconds: float
    error: str = ""
    """Why the call could not be judged: the reference failed, or gave other outputs ("" when
    it was judged)."""

    @property
    def passed(self) -> bool:
        return not self.error and all(o.passed for o in self.outputs)


def results(returned: object) -> tuple[torch.Tensor, ...]:
    """The tensors a kernel or reference returned: one, or a tuple or list of them."""
    if isinstance(returned, torch.Tensor):
        return (returned,)
    if isinstance(returned, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in returned):
        return tuple(returned)
    raise TypeError(
        f"a guarded kernel and its reference return a tensor or a tuple of tensors; got "
        f"{type(returned).__name__}"
    )


def judge(
    reference: Callable[..., object],
    args: Sequence[object],
    outputs: Sequence[torch.Tensor],
    names: Sequence[str],
    depths: Sequence[int],
) -> tuple[OutputVerdict, ...]:
    """Judge the kernel's `outputs` for the inputs `args` (copies the kernel never saw, which
    the reference may write into) against the reference. Raises what the reference raises, and
    ValueError when it returns another number of outputs than the kernel."""
    truth = _truth(reference, args)
    baseline = results(reference(*[copied(a) for a in args]))
    if not len(truth) == len(baseline) == len(outputs):
        raise ValueError(
            f"the kernel returned {len(outputs)} output(s) and the reference {len(baseline)}"
        )
    verdicts = []
    for k, values in enumerate(outputs):
        name = names[k] if k < len(names) else f"output {k}"
        depth = depths[k] if k < len(depths) else 1
        judged = compare(name, values, truth[k], baseline[k], baseline[k].dtype, depth=depth)
        if not judged.passed and judged.failure == "error":
            judged = compare(
                name,
                values,
                truth[k],
                baseline[k],
                baseline[k].dtype,
                depth=depth,
                nudged=_nudged(reference, args, k),
            )
        verdicts.append(_verdict(name, judged))
    return tuple(verdicts)


def _truth(reference: Callable[..., object], args: Sequence[object]) -> tuple[torch.Tensor, ...]:
    return results(in_float64(reference, args))


def _nudged(reference: Callable[..., object], args: Sequence[object], k: int) -> Nudged | None:
    """Output `k` of the reference on the inputs moved by one rounding, in float64 and
    natively; None where the reference refuses such inputs."""
    moved = [nudged(copied(a), position) for position, a in enumerate(args)]
    try:
        truth = _truth(reference, moved)[k]
        baseline = results(reference(*[copied(a) for a in moved]))[k]
    except Exception:  # a reference that refuses inputs off their structure
        return None
    return Nudged(truth, baseline)


def copied(value: object) -> object:
    """A tensor copied off any graph (a call's inputs kept for its check, or given to the
    reference, which may write into them); any other value as it is."""
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def tensor_bytes(values: Sequence[object]) -> int:
    """The bytes of the tensors among `values`."""
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def _verdict(name: str, judged: Comparison) -> OutputVerdict:
    ratios = [m.error_ratio for m in judged.errors]
    return OutputVerdict(
        name=name,
        passed=judged.passed,
        reason=judged.reason,
        failure=judged.failure,
        error_ratio=max(ratios, default=0.0),
        worst_row=judged.worst_row,
    )
