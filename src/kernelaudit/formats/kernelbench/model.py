"""Running a KernelBench file's code as KernelBench does: importing it, seeding before the model
is built and before each `get_inputs()` draw, and calling a model with weights passed in."""

from __future__ import annotations

import ast
import hashlib
import random
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy
import torch

from kernelaudit.inputs import draws
from kernelaudit.sourcefile import import_source

BATCH = "batch"
"""The one axis a KernelBench problem lets kernelaudit vary: the leading axis of its inputs."""

MODEL_SEED = 42
"""The seed both models are built under: KernelBench's evaluation seeds with 42 (its default)
before calling get_init_inputs(), before building Model, and before building ModelNew."""

_MORE_ROWS = 1_000_003
"""Seed stride of the further `get_inputs()` draws that supply rows past KernelBench's batch."""


def top_level_names(path: Path) -> tuple[set[str], set[str]] | None:
    """The classes and functions a Python file defines at module level, and the names it
    assigns there; None when it cannot be read or parsed. Never imports the file."""
    try:
        tree = ast.parse(Path(path).read_text(), filename=str(path))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None
    defined: set[str] = set()
    assigned: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(node.name)
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        assigned.update(t.id for t in targets if isinstance(t, ast.Name))
    return defined, assigned


def import_file(file: Path, kind: str, stay_on_path: bool) -> ModuleType:
    """Execute `file` (an absolute path) as a module of its own, registered under a name
    derived from its path (Triton and pickling look modules up by name), with its folder first
    on the path while it runs, and after it too with `stay_on_path` (for imports its functions
    make later). Exceptions the file raises propagate."""
    digest = hashlib.sha1(str(file).encode()).hexdigest()[:12]
    name = f"kernelaudit_kernelbench_{kind}_{digest}"
    return import_source(file, name, stay_on_path=stay_on_path)


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """torch's, Python's and NumPy's global generators seeded with `seed` for the block and
    restored after it, so reading a problem leaves the caller's random state as it was. The
    CUDA generator is seeded only where CUDA is already initialised: seeding it otherwise is
    deferred to its initialisation, and would outlive the block."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_initialized() else []
    python_state, numpy_state = random.getstate(), numpy.random.get_state()
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)
        for device in devices:
            torch.cuda.default_generators[device].manual_seed(seed)
        random.seed(seed)
        numpy.random.seed(seed)
        try:
            yield
        finally:
            random.setstate(python_state)
            numpy.random.set_state(numpy_state)


def init_arguments(get_init_inputs: Callable[[], Sequence[object]]) -> list[object]:
    with seeded(MODEL_SEED):
        return list(get_init_inputs())


def build_model(model_class: type, arguments: Sequence[object]) -> object:
    """`model_class(*arguments)` seeded with MODEL_SEED and without autograd, as KernelBench
    builds the reference and the candidate."""
    with seeded(MODEL_SEED), torch.no_grad():
        return model_class(*arguments)


def weight_keys(model: torch.nn.Module) -> tuple[str, ...]:
    """The state-dict keys of the model's parameters and floating buffers, in state-dict order;
    a tied parameter once, under its first name (functional_call ties the others to it)."""
    named = dict(model.named_parameters()) | dict(model.named_buffers())
    return tuple(k for k in model.state_dict() if k in named and named[k].is_floating_point())


@dataclass(frozen=True, eq=False)
class ModelForward:
    """A KernelBench model called as a kernelaudit reference or candidate: its forward's
    arguments positionally, then one tensor per entry of `weights` (state-dict keys), swapped
    into the model for the call.

    keeps_buffers: what happens to buffers that are not weights (integer counters such as
        num_batches_tracked, non-persistent constants). False (the reference): every call gets
        fresh copies on its device, so the truth's and the baseline's calls never see each
        other's state, nor the truth's float64 copies. True (a candidate): they are moved once
        to the device of the calls and live on in the model, as in a KernelBench model, so no
        call pays (and is timed with) a transfer from the host.
    """

    model: torch.nn.Module
    weights: tuple[str, ...]
    keeps_buffers: bool = False

    def __call__(self, *args: object) -> object:
        split = len(args) - len(self.weights)
        tensors: dict[str, object] = dict(zip(self.weights, args[split:], strict=True))
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), None)
        for key, buffer in list(self.model.named_buffers()):
            if key in tensors or device is None:
                continue
            if not self.keeps_buffers:
                tensors[key] = buffer.to(device=device, copy=True)
            elif buffer.device != device:
                owner, _, name = key.rpartition(".")
                setattr(self.model.get_submodule(owner), name, buffer.to(device))
        with torch.no_grad():
            return torch.func.functional_call(self.model, tensors, tuple(args[:split]))

    def weight_shapes(self) -> tuple[tuple[str, tuple[int, ...]], ...]:
        state = self.model.state_dict()
        return tuple((key, tuple(state[key].shape)) for key in self.weights)


@dataclass(frozen=True, eq=False)
class GetInputs:
    """KernelBench's `get_inputs()` as kernelaudit's sampler: each draw seeded with the case's
    seed, the model's initial weights given next to the inputs, and the batch axis resized on
    request (the first rows of the draw, and rows of further draws where more are needed:
    fresh rows rather than repeats, so a kernel that mixes up rows cannot go unseen)."""

    function: Callable[[], Sequence[object]]
    names: tuple[str, ...]
    batched: tuple[int, ...]
    """Positions of the values whose leading axis is the batch axis (none when it is fixed)."""
    batch: int
    weights: tuple[tuple[str, torch.Tensor], ...]
    """(input name, initial value) of every weight."""

    def draw(self, seed: int, batch: int | None = None) -> list[object]:
        """The values of `get_inputs()` under `seed`, with `batch` rows where it is given."""
        values = self._call(seed)
        if batch is None or batch == self.batch or not self.batched:
            return values
        parts = [values]
        for k in range(1, -(-batch // self.batch)):
            parts.append(self._call(seed + _MORE_ROWS * k))
        for position in self.batched:
            rows = torch.cat([part[position] for part in parts])  # type: ignore[misc]
            values[position] = rows.narrow(0, 0, batch).clone()
        return values

    def _call(self, seed: int) -> list[object]:
        with seeded(seed), draws.spread_global_draws():
            values = self.function()
        return [v.detach().to("cpu") if isinstance(v, torch.Tensor) else v for v in values]

    def __call__(self, sizes: Mapping[str, int], seed: int) -> dict[str, object]:
        values = dict(zip(self.names, self.draw(seed, sizes.get(BATCH)), strict=True))
        return values | {name: value.clone() for name, value in self.weights}
