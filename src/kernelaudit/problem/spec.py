"""What should be computed: the declaration a problem module writes.

A problem names its reference, its inputs (each with a role), its outputs, the workloads it
cares about (axis bindings) and the contract a candidate must honour. Everything here is a
small frozen value; lists given by a user are stored as tuples so a problem can be hashed,
compared and shipped to a worker process unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

import torch

from kernelaudit.problem.dims import Dim
from kernelaudit.problem.domain import Domain

LAYOUTS: tuple[str, ...] = (
    "contiguous",
    "transposed",
    "permuted",
    "strided",
    "offset",
    "expanded",
    "broadcast",
)
"""Every memory layout kernelaudit knows; `Contract.layouts` picks those a candidate must take."""


def _tuple(value: object) -> tuple:
    if isinstance(value, tuple):
        return value
    if isinstance(value, (list, range)):
        return tuple(value)
    if isinstance(value, (str, int, torch.dtype)):
        return (value,)
    return value  # validation reports anything else with the field's name


@dataclass(frozen=True)
class Axis:
    """A symbolic size. Boundary sizes tried by the audit respect `min`, `max` and `multiple_of`."""

    name: str
    min: int = 1
    max: int | None = None
    multiple_of: int = 1

    def admits(self, size: int) -> bool:
        if size < self.min or size % self.multiple_of:
            return False
        return self.max is None or size <= self.max


@dataclass(frozen=True)
class TensorInput:
    """A floating-point tensor. With several `dtypes`, the i-th entry of every multi-dtype
    input forms the i-th dtype configuration of the problem.

    role: "activation" and "weight" are drawn from value distributions; "upstream" is the
        gradient of a loss with respect to a forward output, as a backward kernel receives it
        (drawn varying per element, and presented by the gradients check transposed, strided,
        stride-0 and as the all-ones broadcast `loss.sum().backward()` produces); "saved" is a
        tensor the forward keeps for the backward (a norm's reciprocal std, a softmax's
        output): never drawn, it is computed by the problem's `forward` from the inputs it takes.
    """

    name: str
    shape: tuple[Dim, ...]
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    role: Literal["activation", "weight", "upstream", "saved"] = "activation"
    domain: Domain = field(default_factory=Domain)
    """What its callers guarantee (finite, positive, a range, contiguous): `problem.domain`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _tuple(self.shape))
        object.__setattr__(self, "dtypes", _tuple(self.dtypes))


@dataclass(frozen=True)
class IndexInput:
    """An integer tensor whose values index axis `bound`: every value lies in [0, size(bound))."""

    name: str
    shape: tuple[Dim, ...]
    bound: str
    dtype: torch.dtype = torch.int64
    domain: Domain = field(default_factory=Domain)
    """What its callers guarantee (contiguous): `problem.domain`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _tuple(self.shape))


@dataclass(frozen=True)
class MaskInput:
    """A mask over the last axis of `shape`. `kind="bool"`: True keeps an element.
    `kind="additive"`: 0 keeps, -inf masks, added to scores of dtype `dtype`."""

    name: str
    shape: tuple[Dim, ...]
    kind: Literal["bool", "additive"] = "bool"
    dtype: torch.dtype = torch.bool
    domain: Domain = field(default_factory=Domain)
    """What its callers guarantee (at least `min_kept` kept per row, contiguous):
    `problem.domain`."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _tuple(self.shape))
        if self.kind == "additive" and self.dtype == torch.bool:
            object.__setattr__(self, "dtype", torch.float32)


@dataclass(frozen=True)
class ScalarInput:
    """A Python scalar argument: a fixed number, or the size of an axis (`value="hidden"`).

    choices: other values the argument may take, for arguments that select a mode (a
        reduction, a flag, an optional feature); `value` is the default and every choice is
        exercised by the audit. A case names a choice by its `str()`. With choices, a string
        value is a literal mode ("mean"), not an axis name.
    """

    name: str
    value: float | int | str | bool | None
    choices: tuple[float | int | str | bool | None, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.choices, (list, range)):
            object.__setattr__(self, "choices", tuple(self.choices))

    @property
    def axis(self) -> str | None:
        """The axis whose size this argument is, if it is one."""
        return self.value if isinstance(self.value, str) and not self.choices else None

    def modes(self) -> tuple[float | int | str | bool | None, ...]:
        """Every value the argument may take: the default first, then the other choices."""
        return (self.value, *(c for c in self.choices if c != self.value))


@dataclass(frozen=True)
class GeneratedInput:
    """A tensor only the problem's own generator (`Problem.sampler`) can produce: offsets,
    grids or indices with a structure kernelaudit cannot draw on its own. Its values always
    come from the generator; its layouts are still varied."""

    name: str
    shape: tuple[Dim, ...]
    dtype: torch.dtype = torch.int64

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _tuple(self.shape))


Input = TensorInput | IndexInput | MaskInput | GeneratedInput | ScalarInput


@dataclass(frozen=True)
class Sampler:
    """The input generator a benchmark ships with its problem (SOL-ExecBench's and
    KernelBench's `get_inputs`), offered as the value distribution "get_inputs" for every input,
    next to kernelaudit's own: never the only one.

    function: called with (sizes, seed), where sizes maps every axis to its size in the case,
        returns the value of every input by name (tensors on any device, scalars as numbers);
        the same arguments must give the same values.
    default_for: the inputs whose default distribution is the generator's (those the format
        says it generates; the others default to their role's distribution).
    """

    function: Callable[[Mapping[str, int], int], Mapping[str, object]]
    default_for: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "default_for", _tuple(self.default_for))


@dataclass(frozen=True)
class Output:
    """A result. `dtype` is a torch dtype or the name of an input whose dtype it follows."""

    name: str
    shape: tuple[Dim, ...]
    dtype: torch.dtype | str = torch.float32

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", _tuple(self.shape))


@dataclass(frozen=True)
class Workload:
    """One binding of every axis to a size, as the problem's users run it."""

    sizes: tuple[tuple[str, int], ...]
    name: str = ""

    @classmethod
    def of(cls, value: Workload | Mapping[str, int], index: int) -> Workload:
        if isinstance(value, Workload):
            return value
        if not isinstance(value, Mapping):
            return cls(sizes=value, name=f"workload {index}")  # type: ignore[arg-type]
        return cls(sizes=tuple(value.items()), name=f"workload {index}")

    def as_dict(self) -> dict[str, int]:
        return dict(self.sizes)

    def held_by(self, sizes: Mapping[str, int]) -> bool:
        """Whether `sizes` give each of this workload's axes its size."""
        return dict(self.sizes).items() <= dict(sizes).items()


@dataclass(frozen=True)
class Contract:
    """What the candidate promises.

    style: "return" (the candidate returns its outputs) or "destination" (outputs are passed,
        preallocated, after the inputs, in declaration order, and the candidate fills them).
    mutates: inputs the candidate may write; their values after the call are compared with the
        reference's values after its call.
    deterministic: repeated runs on identical inputs must agree bit for bit; when False they are
        held to the error budget instead.
    layouts: the memory layouts every tensor input must be accepted in.
    library_calls: whether a candidate may spend its time in library kernels the reference
        also launches (cuBLAS, torch's own kernels); when False such a candidate fails as a
        library or reference fallback, when True it is a warning.
    gradients: for a candidate that is an autograd-enabled forward op, the inputs whose
        gradients its backward computes; the gradients check calls backward on its outputs with
        varied upstream gradients and compares these inputs' `.grad` with fp64 autograd of the
        reference.
    batch_invariant: a row computed alone (a batch of one along a batch axis) must equal, bit
        for bit, the same row computed inside a larger batch, as a server that batches
        requests together needs; when False the row alone is held to the error budget.
    batch_axes: the axes along which rows are independent (each row of every result depends
        only on the same row of the inputs: the rows of a matmul's `m`, the tokens of an
        embedding lookup); None: inferred from the reference (`kernelaudit.inputs.batch`),
        (): none.
    """

    style: Literal["return", "destination"] = "return"
    mutates: tuple[str, ...] = ()
    deterministic: bool = True
    layouts: tuple[str, ...] = LAYOUTS
    library_calls: bool = False
    gradients: tuple[str, ...] = ()
    batch_invariant: bool = False
    batch_axes: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "mutates", _tuple(self.mutates))
        object.__setattr__(self, "layouts", _tuple(self.layouts))
        object.__setattr__(self, "gradients", _tuple(self.gradients))
        if self.batch_axes is not None:
            object.__setattr__(self, "batch_axes", _tuple(self.batch_axes))


@dataclass(frozen=True)
class Forward:
    """How the tensors a backward kernel receives from its forward are produced.

    `function` is called with the inputs named in `takes`, in that order, and returns the
    inputs named in `gives` (one tensor, or a tuple in that order); those inputs must have
    role "saved". It runs in float64 on the case's values and its results are rounded to the
    saved inputs' dtypes, so a backward always sees saved tensors consistent with its inputs.
    """

    function: Callable[..., object]
    takes: tuple[str, ...]
    gives: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "takes", _tuple(self.takes))
        object.__setattr__(self, "gives", _tuple(self.gives))


SLOTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "embedding_forward": ("weight", "ids"),
        "embedding_backward": ("grad_out", "ids", "num_embeddings"),
        "rmsnorm_forward": ("x", "weight", "eps"),
        "rmsnorm_backward": ("grad_out", "x", "weight", "rstd"),
        "softmax": ("x",),
        "cross_entropy_forward": ("logits", "targets"),
        "cross_entropy_backward": ("grad_loss", "logits", "targets"),
        "matmul": ("a", "b"),
        "rope": ("x", "cos", "sin"),
        "swiglu": ("gate", "up"),
    }
)
"""The operations of the training check's model a candidate can be plugged into, with the
arguments each is called with, positionally (shapes and meaning in
`kernelaudit.training.slots`). A problem wired to a slot declares its inputs in this order."""


@dataclass(frozen=True)
class Problem:
    """A complete declaration: what to compute and how a candidate will be called.

    The reference takes the inputs positionally, in declaration order, and returns the outputs
    (one tensor, or a tuple in declaration order). The candidate is called the same way; with
    `Contract(style="destination")` it also receives the preallocated outputs.
    """

    name: str
    reference: Callable[..., object]
    axes: tuple[Axis, ...]
    inputs: tuple[Input, ...]
    outputs: tuple[Output, ...]
    workloads: tuple[Workload, ...]
    contract: Contract = field(default_factory=Contract)
    description: str = ""
    forward: Forward | None = None
    """For a backward problem with "saved" inputs: how they are produced."""
    slot: str = ""
    """The operation of the training check's model this problem's candidates fit (one of
    `SLOTS`); "" when the problem is not wired into the training check."""
    source: str = ""
    """The file the problem was loaded from ("" when built in code)."""
    source_files: tuple[tuple[str, str], ...] = ()
    """The problem's file and every module loaded from its folder when it was loaded (helpers
    its reference imports), each as its path within the folder and the sha256 of its bytes
    then: what its reference is made of (`problem.load.loaded_from`; empty when built in
    code). The training check keeps the reference's runs by them (`training.kept`)."""
    sampler: Sampler | None = None
    """The benchmark's own input generator, when the problem came with one."""
    notes: tuple[str, ...] = ()
    """How a reader interpreted a format where it states less than kernelaudit needs (an input
    role inferred, an axis held fixed), one sentence each, shown in the report."""
    recorded_cases: tuple[Any, ...] = ()
    """Cases made of real calls' inputs (`inputs.recorded.recorded_case`: a failing call a
    guard recorded), which every audit runs first, besides the cases it draws."""

    def __post_init__(self) -> None:
        axes = tuple(a if isinstance(a, Axis) else Axis(a) for a in _tuple(self.axes))
        object.__setattr__(self, "axes", axes)
        object.__setattr__(self, "inputs", _tuple(self.inputs))
        object.__setattr__(self, "outputs", _tuple(self.outputs))
        workloads = _tuple(self.workloads)
        if isinstance(workloads, tuple):
            workloads = tuple(Workload.of(w, i) for i, w in enumerate(workloads))
        object.__setattr__(self, "workloads", workloads)
        object.__setattr__(self, "notes", _tuple(self.notes))

    def input(self, name: str) -> Input:
        return next(i for i in self.inputs if i.name == name)

    def domain(self, name: str) -> Domain:
        """What the callers guarantee about input `name` (nothing, for a scalar)."""
        return getattr(self.input(name), "domain", Domain())

    @property
    def assumed(self) -> tuple[tuple[str, str], ...]:
        """(input, guarantees) for every input whose domain promises something: what an audit
        of this problem takes for granted, in its report."""
        return tuple(
            (i.name, i.domain.describe())
            for i in self.inputs
            if isinstance(i, (TensorInput, IndexInput, MaskInput)) and i.domain.promises
        )

    @property
    def tensor_inputs(self) -> tuple[TensorInput | IndexInput | MaskInput | GeneratedInput, ...]:
        return tuple(i for i in self.inputs if not isinstance(i, ScalarInput))

    def dtype_configs(self) -> tuple[dict[str, torch.dtype], ...]:
        """Every dtype configuration: input name -> dtype, for all tensor inputs."""
        count = max((len(i.dtypes) for i in self.inputs if isinstance(i, TensorInput)), default=1)
        configs = []
        for k in range(count):
            config: dict[str, torch.dtype] = {}
            for i in self.tensor_inputs:
                if isinstance(i, TensorInput):
                    config[i.name] = i.dtypes[k] if len(i.dtypes) > 1 else i.dtypes[0]
                else:
                    config[i.name] = i.dtype
            configs.append(config)
        return tuple(configs)

    def output_dtype(self, output: Output, config: Mapping[str, torch.dtype]) -> torch.dtype:
        if isinstance(output.dtype, torch.dtype):
            return output.dtype
        return config[output.dtype]
