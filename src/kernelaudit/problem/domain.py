"""What a kernel's callers guarantee about one input, stated by the user: the audit draws only
inside it and every report lists it as assumed. The default promises nothing, so the audit stays
adversarial wherever nobody said otherwise.

A finding on inputs no caller can produce (NaN in activations a model never has, a stride an
index tensor never gets) is fair, but a user had to be able to say so. A `Domain` says it, on the
input of a native problem (`TensorInput(..., domain=Domain(finite=True))`) or for any format
from the command line (`--assume logits=finite`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

import torch

from kernelaudit.errors import CaseUnavailable, UsageError

if TYPE_CHECKING:
    from kernelaudit.problem.spec import Problem

NONFINITE_DRAWS = frozenset({"nonfinite", "neg_inf_rows"})
"""Float draws that put NaN or infinities in an input: not made for a finite one."""
REPEATING_DRAWS = frozenset({"zipf", "hot", "argmax"})
"""Index draws made to repeat ids (or taken from another input's values): not made for ids
declared unique."""
UNORDERED_DRAWS = frozenset({"argmax"})
"""Index draws whose order carries their meaning (labels at another input's argmax): not made
for ids declared sorted."""
TAKEN_DRAWS = frozenset({"argmax"})
"""Index draws taken from another input's values: not made for ids held below a third input."""


@dataclass(frozen=True)
class Domain:
    """The values and layouts an input's callers guarantee.

    finite: no NaN or infinity (floating inputs): the draws that make them are skipped.
    positive: every value above zero (floating inputs): draws are folded to their magnitudes,
        zeros raised to the dtype's smallest normal number.
    low, high: every value within [low, high] (floating inputs): draws are clamped to it, so
        the range's ends are tried too.
    contiguous: the input always arrives contiguous: no other layout is tried for it.
    min_kept: masks: every row keeps at least this many elements (1: no fully masked row).
    sorted_ids: index inputs: the ids arrive in ascending order (a segmented reduction's
        segment ids, a CSR matrix's row ids): every draw is sorted.
    unique_ids: index inputs: no id appears twice (a scatter that writes without
        accumulating): draws made to repeat ids are skipped, the others' repeats replaced by
        ids they left unused, and a case with more ids than rows cannot be made.
    below: index inputs: every id is below the value of the index input of that name at the
        same leading positions (its shape is the start of this input's): positions within
        each sequence's length, slots within each row's count. Each drawn id is scaled from
        its bound onto that limit, so a row's first and last ids stay first and last; a limit
        of 0, which would leave a row no id to pass, is raised to 1.
    """

    finite: bool = False
    positive: bool = False
    low: float | None = None
    high: float | None = None
    contiguous: bool = False
    min_kept: int = 0
    sorted_ids: bool = False
    unique_ids: bool = False
    below: str = ""

    @property
    def promises(self) -> bool:
        return self != Domain()

    def describe(self) -> str:
        """The guarantees as `--assume` writes them ("finite,range:0:1,contiguous"), which
        `parse_assumption` reads back; "" for none."""
        said = [word for word in ("finite", "positive") if getattr(self, word)]
        if self.low is not None or self.high is not None:
            low = "" if self.low is None else repr(float(self.low))
            high = "" if self.high is None else repr(float(self.high))
            said.append(f"range:{low}:{high}")
        if self.contiguous:
            said.append("contiguous")
        if self.min_kept:
            said.append(f"min_kept:{self.min_kept}")
        said += [
            word for word, on in (("sorted", self.sorted_ids), ("unique", self.unique_ids)) if on
        ]
        if self.below:
            said.append(f"below:{self.below}")
        return ",".join(said)

    def admits(self, draw: str) -> bool:
        """Whether a float or index draw of that name can lie inside this domain."""
        return not (
            (self.finite and draw in NONFINITE_DRAWS)
            or (self.unique_ids and draw in REPEATING_DRAWS)
            or (self.sorted_ids and draw in UNORDERED_DRAWS)
            or (bool(self.below) and draw in TAKEN_DRAWS)
        )


_KINDS = {"TensorInput": "float", "IndexInput": "index", "MaskInput": "mask"}


def domain_errors(domain: object, inp: object) -> list[tuple[str, str, str]]:
    """(field, what is wrong, how to fix it) for a domain declared on input `inp` (a
    TensorInput, IndexInput or MaskInput)."""
    kind = _KINDS.get(type(inp).__name__, "")
    if not isinstance(domain, Domain):
        return [("domain", f"{domain!r} is not a Domain", "write Domain(finite=True, ...)")]
    errors = []
    values = domain.finite or domain.positive or domain.low is not None or domain.high is not None
    if values and kind != "float":
        errors.append(
            (
                "domain",
                "finite, positive, low and high describe floating values",
                "state them on a TensorInput; an index input's range is its bound",
            )
        )
    if domain.min_kept and kind != "mask":
        errors.append(("domain.min_kept", "min_kept describes masks", "state it on a MaskInput"))
    for name in ("sorted_ids", "unique_ids", "below"):
        if getattr(domain, name) and kind != "index":
            errors.append(
                (f"domain.{name}", f"{name} describes index inputs", "state it on an IndexInput")
            )
    if domain.below and (domain.sorted_ids or domain.unique_ids):
        errors.append(
            (
                "domain.below",
                "ids held below another input are scaled row by row, which keeps neither a "
                "global order nor distinct ids",
                "state below alone, or sorted/unique alone",
            )
        )
    if not isinstance(domain.below, str):
        errors.append(("domain.below", f"{domain.below!r} is not a name", "name an index input"))
    if domain.min_kept < 0:
        errors.append(("domain.min_kept", f"{domain.min_kept} is negative", "give 0 or more"))
    for name in ("low", "high"):
        bound = getattr(domain, name)
        if bound is not None and (
            isinstance(bound, bool) or not isinstance(bound, (int, float)) or math.isnan(bound)
        ):
            errors.append((f"domain.{name}", f"{bound!r} is not a number", "give a number"))
            return errors
    if domain.low is not None and domain.high is not None and domain.low > domain.high:
        errors.append(("domain", f"low {domain.low} is above high {domain.high}", "swap them"))
    if domain.positive and domain.high is not None and domain.high <= 0:
        errors.append(
            ("domain", f"positive with high {domain.high}", "drop positive or raise high")
        )
    return errors


def within(values: torch.Tensor, domain: Domain) -> torch.Tensor:
    """Drawn floating `values` moved inside `domain` (magnitudes for positive, clamped to
    [low, high] with both ends rounded inward to the dtype); the values as they were when it
    states no range."""
    dtype = values.dtype
    if domain.positive:
        values = values.abs()
        values = values.masked_fill(values == 0, torch.finfo(dtype).tiny)
    if domain.low is not None:
        values = torch.maximum(values, _inward(domain.low, dtype, up=True))
    if domain.high is not None:
        values = torch.minimum(values, _inward(domain.high, dtype, up=False))
    return values


def _inward(bound: float, dtype: torch.dtype, up: bool) -> torch.Tensor:
    """`bound` in `dtype`, moved one step inward where rounding took it outside."""
    rounded = torch.tensor(bound, dtype=torch.float64).to(dtype)
    outside = float(rounded) < bound if up else float(rounded) > bound
    if outside:
        toward = torch.tensor(math.inf if up else -math.inf, dtype=dtype)
        rounded = torch.nextafter(rounded, toward)
    return rounded


def keep_at_least(keep: torch.Tensor, count: int) -> torch.Tensor:
    """A boolean keep-mask (rows along the last dimension) with at least `count` elements kept
    per row: rows short of it keep their first positions too."""
    if count <= 0 or keep.numel() == 0:
        return keep
    length = keep.shape[-1] if keep.dim() else 1
    rows = keep.reshape(-1, length).clone()
    short = rows.sum(dim=1) < min(count, length)
    rows[short, : min(count, length)] = True
    return rows.view(keep.shape)


def arranged(
    ids: torch.Tensor, bound: int, domain: Domain, generator: torch.Generator
) -> torch.Tensor:
    """Drawn ids moved inside `domain`: repeats replaced by ids the draw left unused (in an
    order `generator`, on the ids' device, draws) for unique ids, then sorted for sorted
    ones."""
    if domain.unique_ids:
        ids = _distinct(ids, bound, generator)
    if domain.sorted_ids:
        ids = ids.reshape(-1).sort().values.view(ids.shape)
    return ids


def _distinct(ids: torch.Tensor, bound: int, generator: torch.Generator) -> torch.Tensor:
    flat = ids.reshape(-1)
    if flat.numel() > bound:
        raise CaseUnavailable(
            f"{flat.numel()} ids declared unique cannot index {bound} rows",
            "more ids than rows, for ids declared unique",
        )
    order = torch.argsort(flat, stable=True)
    ranked = flat[order]
    repeats = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
    repeats[order[1:][ranked[1:] == ranked[:-1]]] = True  # every occurrence after the first
    present = torch.zeros(bound, dtype=torch.bool, device=flat.device)
    present[flat] = True
    unused = (~present).nonzero().view(-1)
    shuffled = torch.randperm(unused.numel(), generator=generator, device=flat.device)
    unused = unused[shuffled]
    flat = flat.clone()
    flat[repeats] = unused[: int(repeats.sum())].to(flat.dtype)
    return flat.view(ids.shape)


def parse_assumption(text: str) -> tuple[str, Domain]:
    """`--assume NAME=PROPERTY[,PROPERTY...]`: "logits=finite", "x=positive,contiguous",
    "scale=range:0:1", "mask=min_kept:1", "ids=sorted,unique", "positions=below:lengths"."""
    name, equals, said = text.partition("=")
    if not equals or not name.strip() or not said.strip():
        raise UsageError(
            f"--assume {text!r}: write INPUT=PROPERTY[,PROPERTY...], e.g. logits=finite or "
            "ids=contiguous"
        )
    known = {f.name for f in fields(Domain)}
    settings: dict[str, object] = {}
    for item in said.split(","):
        word, _, rest = item.strip().partition(":")
        try:
            if word in ("finite", "positive", "contiguous") and not rest:
                settings[word] = True
            elif word in ("sorted", "unique") and not rest:
                settings[f"{word}_ids"] = True
            elif word == "range":
                low, _, high = rest.partition(":")
                settings["low"] = float(low) if low.strip() else None
                settings["high"] = float(high) if high.strip() else None
            elif word == "min_kept":
                settings["min_kept"] = int(rest)
            elif word == "below" and rest.strip():
                settings["below"] = rest.strip()
            else:
                raise ValueError(word)
        except ValueError:
            raise UsageError(
                f"--assume {text!r}: {item.strip()!r} is not a property; use finite, positive, "
                "contiguous, range:LOW:HIGH (either end may be empty), min_kept:N, sorted, "
                "unique or below:INPUT"
            ) from None
    assert set(settings) <= known
    return name.strip(), Domain(**settings)  # type: ignore[arg-type]


def assuming(problem: Problem, assumptions: Iterable[tuple[str, str]]) -> Problem:
    """`problem` with the domains of `assumptions` ((input, properties) as `--assume` writes
    them, or as a report's `assumed` keeps them) in place of its inputs' own."""
    stated = dict(assumptions)
    if not stated:
        return problem
    names = {i.name: i for i in problem.inputs}
    inputs = []
    for name, said in stated.items():
        inp = names.get(name)
        if inp is None or not hasattr(inp, "domain"):
            drawn = ", ".join(n for n, i in names.items() if hasattr(i, "domain"))
            raise UsageError(
                f"--assume {name}={said}: problem {problem.name!r} has no tensor input "
                f"{name!r}; name one of: {drawn}"
            )
    for inp in problem.inputs:
        if inp.name not in stated:
            inputs.append(inp)
            continue
        _, domain = parse_assumption(f"{inp.name}={stated[inp.name]}")
        earlier = {i.name: i for i in inputs}
        errors = domain_errors(domain, inp) + relation_errors(domain, inp, earlier)
        if errors:
            _, message, fix = errors[0]
            raise UsageError(f"--assume {inp.name}={stated[inp.name]}: {message}; {fix}")
        inputs.append(replace(inp, domain=domain))
    return replace(problem, inputs=tuple(inputs))


def relation_errors(
    domain: Domain, inp: object, earlier: Mapping[str, object]
) -> list[tuple[str, str, str]]:
    """(field, what is wrong, how to fix it) for the input `domain.below` names, among the
    inputs declared before `inp` (`earlier`, by name)."""
    if not domain.below or not isinstance(domain.below, str):
        return []
    limit = earlier.get(domain.below)
    if limit is None:
        return [
            (
                "domain.below",
                f"no index input {domain.below!r} is declared before {getattr(inp, 'name', '')!r}",
                "name an index input declared earlier (its values are drawn first)",
            )
        ]
    if type(limit).__name__ != "IndexInput":
        return [("domain.below", f"{domain.below!r} is not an index input", "name one")]
    lead = tuple(getattr(limit, "shape", ()))
    shape = tuple(getattr(inp, "shape", ()))
    if shape[: len(lead)] != lead:
        return [
            (
                "domain.below",
                f"the shape of {domain.below!r} {lead} does not start the shape {shape}",
                "hold ids below an input over their leading axes (lengths of shape (batch,) "
                "for positions of shape (batch, n))",
            )
        ]
    return []
