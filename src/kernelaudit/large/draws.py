"""The large case's inputs, drawn directly on the device from the plain values of
`kernelaudit.large.run.input_specs`: in the candidate's process (`kernelaudit.large.child`)
and, where the candidate fails on the case, in the auditor for the reference's run of it, the
same values from the same seed."""

from __future__ import annotations

import zlib
from typing import Any

import torch

from kernelaudit.inputs.relations import held_below
from kernelaudit.problem.domain import Domain, arranged


def drawn(spec: dict[str, Any], device: torch.device, seed: int) -> object:
    """One input on the device: normal values for floats, ids in [0, bound) for indices, a
    random keep pattern for masks; the same seed gives the same values."""
    kind = spec["kind"]
    if kind == "scalar":
        return spec["value"]
    generator = torch.Generator(device=device)
    generator.manual_seed(zlib.crc32(f"{seed}\0{spec['name']}".encode()))
    dtype = getattr(torch, spec["dtype"])
    tensor = torch.empty(spec["shape"], dtype=dtype, device=device)
    if kind == "float":
        tensor.normal_(generator=generator)
        if spec.get("positive"):
            tensor.abs_().clamp_(min=torch.finfo(dtype).tiny)
        if spec.get("low") is not None or spec.get("high") is not None:
            tensor.clamp_(min=spec.get("low"), max=spec.get("high"))
        return tensor
    if kind == "index":
        return tensor.random_(0, max(int(spec["bound"]), 1), generator=generator)
    tensor.random_(0, 2, generator=generator)
    if spec.get("min_kept") and tensor.dim():
        tensor[..., : int(spec["min_kept"])] = 1  # every row keeps what its callers keep
    if kind == "additive":
        # 0 and 1 become log(1) = 0 (kept) and log(0) = -inf (masked), in place: no second
        # tensor of this size
        tensor.neg_().add_(1).log_()
    return tensor


def drawn_all(specs: list[dict[str, Any]], device: torch.device, seed: int) -> list[object]:
    """Every input of the large case (`drawn`), then held to what its callers guarantee of
    ids: distinct or sorted (`problem.domain.arranged`, as the audit's own draws are; a
    `CaseUnavailable` where there are more ids than rows), or below another input's values at
    the same leading positions (`Domain.below`)."""
    args = [drawn(spec, device, seed) for spec in specs]
    named = {spec["name"]: i for i, spec in enumerate(specs)}
    for i, spec in enumerate(specs):
        ids = args[i]
        if spec["kind"] != "index" or not isinstance(ids, torch.Tensor):
            continue
        bound = max(int(spec["bound"]), 1)
        domain = Domain(sorted_ids=bool(spec.get("sorted")), unique_ids=bool(spec.get("unique")))
        if domain.promises:
            generator = torch.Generator(device=device)
            generator.manual_seed(zlib.crc32(f"{seed}\0{spec['name']}\0arranged".encode()))
            ids = arranged(ids, bound, domain, generator)
        limit = named.get(spec.get("below") or "")
        if limit is not None:
            limits = args[limit]
            assert isinstance(limits, torch.Tensor)
            ids, args[limit] = held_below(ids, limits, bound)
        args[i] = ids
    return args
