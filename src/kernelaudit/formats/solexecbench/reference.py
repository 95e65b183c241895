"""The definition's `reference` source as a module: its `run` is the problem's reference, and
its `custom_inputs_entrypoint` (with the workloads' safetensors files, plain random draws and
the structured draws the reader infers) is the problem's input generator."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import torch

from kernelaudit.errors import CaseUnavailable, ProblemError
from kernelaudit.formats.cache import cache_folder, write_if_changed
from kernelaudit.formats.solexecbench.structure import draw_structured
from kernelaudit.formats.solexecbench.tensor_files import (
    file_inputs,
    read_inputs,
    unreadable,
    workload_at,
)
from kernelaudit.inputs import draws
from kernelaudit.problem.dims import dim_size
from kernelaudit.sourcefile import import_source

if TYPE_CHECKING:
    from kernelaudit.formats.solexecbench.reader import DefinitionReader


def reference_module(reader: DefinitionReader) -> Any:
    """The definition's reference source as an importable module, written into the cache so
    tracebacks and source inspection point at a real file."""
    source = reader.data.get("reference")
    if not isinstance(source, str) or "def run" not in source:
        raise ProblemError(
            str(reader.file),
            "reference",
            "the definition has no reference source defining run(...)",
            "put the reference's Python source, with a function `run`, in `reference`",
        )
    folder = cache_folder("solexecbench", str(reader.file.resolve()), source)
    file = write_if_changed(folder / "reference.py", source)
    name = f"kernelaudit_solexecbench_{folder.name}"
    if name in sys.modules:
        return sys.modules[name]
    try:
        module = import_source(file, name, folder_on_path=False)
    except Exception as error:
        raise ProblemError(
            str(reader.file),
            "reference",
            f"importing the reference raised {type(error).__name__}: {error}",
            "fix the reference source",
        ) from None
    return module


def generator(
    reader: DefinitionReader, module: Any, scalars: dict[str, object]
) -> Callable[..., dict]:
    """The problem's input generator, called with (sizes, seed): the values of `get_inputs`
    (given every axis and `scalars`), of the workload's safetensors files, plain random draws
    for the rest, and the structured draws the reader inferred over them."""
    entry = reader.data.get("custom_inputs_entrypoint")
    get_inputs = getattr(module, entry, None) if isinstance(entry, str) else None
    if isinstance(entry, str) and get_inputs is None:
        raise ProblemError(
            str(reader.file),
            "custom_inputs_entrypoint",
            f"the reference defines no function {entry!r}",
            "name a function the reference source defines",
        )

    def generate(sizes: Mapping[str, int], seed: int) -> dict[str, object]:
        axes = reader.all_sizes(sizes)
        given = _from_files(reader, sizes)
        shapes, dtypes = {}, {}
        for name, spec in reader.spec_inputs.items():
            if spec.get("shape") is not None:
                shapes[name] = tuple(dim_size(reader.dim(d, name), axes) for d in spec["shape"])
                dtypes[name] = getattr(torch, spec["dtype"])
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            if get_inputs:
                with draws.spread_global_draws():
                    given.update(get_inputs({**axes, **scalars}, "cpu"))
            for name, shape in shapes.items():
                # a structured input is drawn below, not twice
                if name not in given and name not in reader.named:
                    given[name] = _random(shape, dtypes[name], axes)
            given.update(draw_structured(reader.named, shapes, dtypes, {**scalars, **given}))
        return given

    return generate


def _from_files(reader: DefinitionReader, sizes: Mapping[str, int]) -> dict[str, object]:
    """The inputs the workload at `sizes` reads from safetensors files (none for problems
    whose workloads read none)."""
    if not any(file_inputs(w) for w in reader.workloads):
        return {}
    unread = unreadable(reader.folder, reader.workloads)
    if unread is not None:
        raise FileNotFoundError(unread)
    workload = workload_at(reader.workloads, sizes)
    if workload is None:
        names = sorted({n for w in reader.workloads for n in file_inputs(w)})
        raise CaseUnavailable(
            f"inputs {', '.join(names)} are recorded in safetensors files only at the sizes of "
            f"the workloads, and sizes {dict(sizes)} match none of them"
        )
    return dict(read_inputs(reader.folder, workload))


def _random(shape: tuple[int, ...], dtype: torch.dtype, axes: Mapping[str, int]) -> torch.Tensor:
    """An input the workload marks random, drawn the plain way a benchmark does (from the
    seeded global generator, on several cores; a large one once for every size that draws
    it at the same place in the generator's sequence, `draws.kept_from_global`)."""
    if dtype == torch.bool:
        return draws.kept_rand(shape) > 0.5
    if dtype.is_floating_point:
        # the kept draw is shared with every other size that draws it: a copy of its own
        return draws.kept_randn(shape).to(dtype, copy=True)
    high = shape[-1] if shape else 2
    return torch.randint(0, max(high, 1), shape, dtype=dtype)


def reference(module: Any, outputs: tuple[str, ...]) -> Callable[..., object]:
    """The module's `run`, with a returned dict read in the order of `outputs`."""
    run = module.run

    def reference(*args: object) -> object:
        returned = run(*args)
        if isinstance(returned, dict):
            return tuple(returned[name] for name in outputs)
        return returned

    reference.__name__ = "run"
    reference.__wrapped__ = run  # type: ignore[attr-defined]
    return reference
