"""Reading a KernelBench problem file as a kernelaudit problem.

What the file leaves unsaid is inferred, and written into `Problem.notes`:
- every value of `get_inputs()` is an input: floating tensors activations, bool tensors masks,
  integer tensors indices into the smallest axis above all their sampled values (or kept as
  `get_inputs()` gives them when negative or structured), Python numbers fixed scalars;
- the model's parameters and floating buffers are inputs with role "weight";
- the leading size shared by every input is the batch axis, free when neither the constructor
  nor the weights mention it and the reference runs at other batch sizes; every other size is
  an axis held at its value, since KernelBench models hard-code their sizes.
"""

from __future__ import annotations

import inspect
import traceback
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import torch

from kernelaudit.errors import ProblemError
from kernelaudit.formats.kernelbench.axes import AxisNames, Batch, infer_batch
from kernelaudit.formats.kernelbench.indices import integer_input
from kernelaudit.formats.kernelbench.model import (
    BATCH,
    MODEL_SEED,
    GetInputs,
    ModelForward,
    build_model,
    import_file,
    init_arguments,
    seeded,
    top_level_names,
    weight_keys,
)
from kernelaudit.problem.spec import (
    Axis,
    Contract,
    Dim,
    Input,
    MaskInput,
    Output,
    Problem,
    Sampler,
    ScalarInput,
    TensorInput,
    Workload,
)
from kernelaudit.problem.validate import validate

WORKLOAD = "kernelbench get_inputs"

SAMPLES = 3
"""How many seeds `get_inputs()` is sampled under to judge what its integer tensors hold."""


def is_kernelbench_problem(path: Path) -> bool:
    """Whether `path` is a KernelBench problem: it defines class Model, get_inputs and
    get_init_inputs, but not ModelNew (a candidate that carries a copy of its problem), and
    assigns no module-level `problem` (a native problem). Read with `ast`, never imported."""
    names = top_level_names(path)
    if names is None:
        return False
    defined, assigned = names
    wanted = {"Model", "get_inputs", "get_init_inputs"}
    return wanted <= defined and "ModelNew" not in defined and "problem" not in assigned


def read_kernelbench_problem(path: Path) -> Problem:
    """The problem a KernelBench file states: `Model(*get_init_inputs())` built once under a
    fixed seed, the values of `get_inputs()` and the model's weights as inputs, the batch axis
    free where the model allows it, every other size held fixed. How each input and axis was
    read is in the problem's `notes`."""
    file = Path(path).resolve()
    try:
        module = import_file(file, "problem", stay_on_path=False)
    except Exception as error:
        fix = f"fix the module so `python {file.name}` runs"
        raise _failed(file, "module", "importing the problem", error, fix) from None
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not hasattr(module, n)]
    if missing:
        raise ProblemError(
            str(file),
            missing[0],
            f"the module defines no {', '.join(missing)}",
            "define class Model(nn.Module), get_inputs() and get_init_inputs()",
        )
    try:
        arguments = init_arguments(module.get_init_inputs)
    except Exception as error:
        fix = "make get_init_inputs() return the list of Model's constructor arguments"
        raise _failed(file, "get_init_inputs", "get_init_inputs()", error, fix) from None
    try:
        model = build_model(module.Model, arguments)
    except Exception as error:
        fix = "make Model(*get_init_inputs()) run on the CPU"
        raise _failed(file, "Model", "building Model(*get_init_inputs())", error, fix) from None
    if not isinstance(model, torch.nn.Module):
        raise ProblemError(
            str(file), "Model", "Model is not a torch.nn.Module", "derive Model from nn.Module"
        )
    return _Reader(file, module, arguments, model).problem()


def _line_in(file: Path, error: BaseException) -> int | None:
    if isinstance(error, SyntaxError) and error.filename and Path(error.filename) == file:
        return error.lineno
    frames = traceback.extract_tb(error.__traceback__)
    return next((f.lineno for f in reversed(frames) if Path(f.filename) == file), None)


def _failed(file: Path, field: str, what: str, error: BaseException, fix: str) -> ProblemError:
    message = f"{what} raised {type(error).__name__}: {error}"
    return ProblemError(str(file), field, message, fix, _line_in(file, error))


class _Reader:
    """One KernelBench file being read: its model, samples of its inputs, and the notes."""

    def __init__(
        self, file: Path, module: ModuleType, arguments: list[object], model: torch.nn.Module
    ) -> None:
        self.file = file
        self.module = module
        self.arguments = arguments
        self.model = model
        for key, tensor in model.state_dict().items():
            if tensor.is_complex():
                raise self.fail(
                    "Model",
                    f"the model's {key} is complex; kernelaudit passes only real weights",
                    "keep complex values out of the model's parameters and buffers",
                )
        keys = weight_keys(model)
        self.reference = ModelForward(model, keys)
        first = self._sample(0)
        # Only integer tensors need more samples; floating ones can be large, and are dropped.
        integers = {
            k
            for k, v in enumerate(first)
            if isinstance(v, torch.Tensor) and not v.is_floating_point()
        }
        self.samples: list[list[object]] = [first]
        for seed in range(1, SAMPLES if integers else 1):
            drawn = self._sample(seed)
            if len(drawn) != len(first):
                raise self.fail(
                    "get_inputs",
                    f"get_inputs() returns {len(first)} values under one seed and {len(drawn)} "
                    "under another",
                    "return the same arguments whatever the seed",
                )
            self.samples.append([v if k in integers else None for k, v in enumerate(drawn)])
        self.names = self._argument_names(len(self.samples[0]))
        taken = set(self.names)
        state = model.state_dict()
        self.weights: list[tuple[str, torch.Tensor]] = []
        for key in keys:
            name = key.replace(".", "__")
            name = f"model__{name}" if name in taken else name
            taken.add(name)
            # the model's own tensors: calls swap copies in, so nothing ever writes into these
            self.weights.append((name, state[key]))
        self.notes: list[str] = []

    def fail(self, field: str, message: str, fix: str) -> ProblemError:
        return ProblemError(str(self.file), field, message, fix)

    def _sample(self, seed: int) -> list[object]:
        fix = "make get_inputs() run on the CPU and return a list of tensors and numbers"
        try:
            with seeded(seed):
                values = self.module.get_inputs()
        except Exception as error:
            raise _failed(self.file, "get_inputs", "get_inputs()", error, fix) from None
        if not isinstance(values, (list, tuple)):
            message = f"get_inputs() returns a {type(values).__name__}, not a list"
            raise self.fail("get_inputs", message, fix)
        for value in values:
            if isinstance(value, torch.Tensor) and value.is_complex():
                raise self.fail("get_inputs", "get_inputs() returns a complex tensor", fix)
            if not isinstance(value, (torch.Tensor, int, float, bool)):
                message = f"get_inputs() returns a {type(value).__name__}"
                raise self.fail("get_inputs", message, fix)
        return [v.detach().to("cpu") if isinstance(v, torch.Tensor) else v for v in values]

    def _argument_names(self, count: int) -> list[str]:
        """The forward's parameter names, "input<k>" past them (a forward taking *args)."""
        try:
            parameters = list(inspect.signature(self.module.Model.forward).parameters.values())
        except (TypeError, ValueError):
            parameters = []
        positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        named = [p.name for p in parameters[1:] if p.kind in positional]
        names = named[:count] + [f"input{k}" for k in range(len(named), count)]
        return [n if n not in names[:k] else f"{n}{k}" for k, n in enumerate(names)]

    def tensors(self) -> list[tuple[int, torch.Tensor]]:
        return [(k, v) for k, v in enumerate(self.samples[0]) if isinstance(v, torch.Tensor)]

    def sampler(self, batch: Batch) -> GetInputs:
        batched = tuple(k for k, t in self.tensors() if t.dim()) if batch.free else ()
        return GetInputs(
            function=self.module.get_inputs,
            names=tuple(self.names),
            batched=batched,
            batch=batch.size,
            weights=tuple(self.weights),
        )

    def call(self, values: Sequence[object]) -> tuple[torch.Tensor, ...]:
        """The reference's outputs on `values` (inputs, then weights), as a tuple."""
        returned = self.reference(*values)
        outputs = tuple(returned) if isinstance(returned, (tuple, list)) else (returned,)
        for k, output in enumerate(outputs):
            if not isinstance(output, torch.Tensor):
                raise self.fail(
                    "Model.forward",
                    f"Model.forward returns a {type(output).__name__} as value {k}",
                    "return a tensor or a tuple of tensors",
                )
        return outputs

    def fresh(self) -> list[object]:
        """Copies of the first sample's values and of the weights, for one call."""
        values = [*self.samples[0], *(value for _, value in self.weights)]
        return [v.clone() if isinstance(v, torch.Tensor) else v for v in values]

    # -- the reference at KernelBench's sizes, and at others -------------------------------------

    def first_call(self) -> tuple[tuple[torch.Tensor, ...], tuple[str, ...]]:
        """The outputs at KernelBench's sizes and the inputs the reference writes into. A
        reference that gives two answers for one input cannot be a truth, and is refused."""
        given = self.fresh()
        try:
            outputs = self.call(given)
            again = self.call(self.fresh())
        except ProblemError:
            raise
        except Exception as error:
            fix = "make Model(*get_init_inputs())(*get_inputs()) run on the CPU"
            raise _failed(self.file, "Model.forward", "the model", error, fix) from None
        if not all(_same(a, b) for a, b in zip(outputs, again, strict=True)):
            raise self.fail(
                "Model.forward",
                "Model gives different outputs for identical inputs (it draws random numbers "
                "in forward, as dropout does in training mode)",
                "make forward deterministic: dropout probability 0, or self.eval() in __init__",
            )
        names = [*self.names, *(name for name, _ in self.weights)]
        originals = [*self.samples[0], *(value for _, value in self.weights)]
        mutated = tuple(
            name
            for name, before, after in zip(names, originals, given, strict=True)
            if isinstance(before, torch.Tensor) and not _same(before, after)  # type: ignore[arg-type]
        )
        return outputs, mutated

    def batch(self, outputs: tuple[torch.Tensor, ...]) -> Batch:
        weights = [value for _, value in self.weights]

        def run(at: Batch, size: int) -> tuple[torch.Tensor, ...]:
            return self.call(self.sampler(at).draw(0, size) + [w.clone() for w in weights])

        tensors = [t for _, t in self.tensors()]
        return infer_batch(tensors, self.arguments, weights, outputs, run)

    # -- declarations ----------------------------------------------------------------------------

    def problem(self) -> Problem:
        outputs, mutated = self.first_call()
        batch = self.batch(outputs)
        exclude = batch.size if batch.free else None
        constants = {
            name: value
            for name, value in vars(self.module).items()
            if type(value) is int and not name.startswith("_") and value != exclude
        }
        axes = AxisNames(constants, {BATCH} if batch.free else set())
        shapes = self.shapes(batch, axes)
        inputs: list[Input] = []
        for position, (name, value) in enumerate(zip(self.names, self.samples[0], strict=True)):
            if isinstance(value, torch.Tensor):
                inputs.append(self.declare(name, position, value, shapes[name], axes, batch))
            else:
                inputs.append(ScalarInput(name, value))
                kind = type(value).__name__
                self.notes.append(f"{name}: a Python {kind} from get_inputs(), passed as {value!r}")
        for name, value in self.weights:
            inputs.append(TensorInput(name, shapes[name], dtypes=(value.dtype,), role="weight"))
        for name in mutated:
            self.notes.append(
                f"{name}: the model writes into it when called (a running statistic in training "
                "mode, say), so a candidate must too; its value after the call is compared"
            )
        sizes = {name: size for size, name in axes.by_size.items()}
        declared_axes = [Axis(name, min=size, max=size) for name, size in sizes.items()]
        if batch.free:
            declared_axes.insert(0, Axis(BATCH, min=batch.minimum))
            sizes = {BATCH: batch.size, **sizes}
        problem = Problem(
            name=self.file.stem,
            reference=self.reference,
            axes=tuple(declared_axes),
            inputs=tuple(inputs),
            outputs=self.outputs(outputs, batch, axes),
            workloads=(Workload(tuple(sizes.items()), WORKLOAD),),
            # as KernelBench evaluates: contiguous tensors (a module's parameters always are),
            # run-to-run differences held to the error budget rather than bit-exact
            contract=Contract(
                style="return", mutates=mutated, deterministic=False, layouts=("contiguous",)
            ),
            # Model's own docstring: inspect.getdoc would fall back to nn.Module's
            description=inspect.cleandoc(self.module.Model.__doc__ or self.module.__doc__ or ""),
            source=str(self.file),
            sampler=Sampler(self.sampler(batch), default_for=tuple(i.name for i in inputs)),
            notes=(
                *self.general_notes(batch),
                *self.notes,
                "contract as KernelBench evaluates: contiguous inputs, run-to-run differences "
                "held to the error budget rather than bit-exact",
            ),
        )
        validate(problem)
        return problem

    def shapes(self, batch: Batch, axes: AxisNames) -> dict[str, tuple[Dim, ...]]:
        """Every tensor input's and weight's shape over axes, naming each size's axis where it
        is first seen (inputs first, so the names follow the data rather than the weights)."""
        shapes: dict[str, tuple[Dim, ...]] = {}
        for k, value in self.tensors():
            name = self.names[k]
            shapes[name] = tuple(
                BATCH if batch.free and d == 0 else axes.axis(size, f"{name}_dim{d}")
                for d, size in enumerate(value.shape)
            )
        for name, value in self.weights:
            shapes[name] = tuple(axes.axis(s, f"{name}_dim{d}") for d, s in enumerate(value.shape))
        return shapes

    def declare(
        self,
        name: str,
        position: int,
        value: torch.Tensor,
        shape: tuple[Dim, ...],
        axes: AxisNames,
        batch: Batch,
    ) -> Input:
        if value.is_floating_point():
            return TensorInput(name, shape, dtypes=(value.dtype,))
        if value.dtype == torch.bool and value.dim():
            self.notes.append(f"{name}: bool tensor read as a mask over its last axis")
            return MaskInput(name, shape, kind="bool")
        drawn = [sample[position] for sample in self.samples]
        declared, note = integer_input(name, shape, value.dtype, drawn, axes, batch)
        self.notes.append(note)
        return declared

    def outputs(
        self, outputs: tuple[torch.Tensor, ...], batch: Batch, axes: AxisNames
    ) -> tuple[Output, ...]:
        """Each output at KernelBench's sizes, its dims following the batch where they do,
        else named by the fixed axis of their size, else literal."""
        declared = []
        for k, output in enumerate(outputs):
            dims = batch.output_dims[k] if batch.free else (None,) * output.dim()
            shape = tuple(
                dim if dim is not None else axes.by_size.get(size, size)
                for dim, size in zip(dims, output.shape, strict=True)
            )
            name = "output" if len(outputs) == 1 else f"output{k}"
            declared.append(Output(name, shape, dtype=output.dtype))
        return tuple(declared)

    def general_notes(self, batch: Batch) -> list[str]:
        notes = [
            f"Inputs {', '.join(self.names) or '(none)'} are the values of get_inputs(), in "
            "order; by default get_inputs() draws them, seeded with the case's seed."
        ]
        if self.weights:
            notes.append(
                f"The model's {len(self.weights)} parameters and floating buffers are inputs "
                "too (role weight, named by state-dict key with '.' written '__'), by default "
                f"as Model(*get_init_inputs()) built after seeding with {MODEL_SEED} holds them; "
                "Model and ModelNew both receive them by name."
            )
        if any(getattr(m, "track_running_stats", False) for m in self.model.modules()):
            mode = "training" if self.model.training else "eval"
            statistics = "the batch's" if self.model.training else "their running"
            notes.append(
                f"The model runs in {mode} mode, the mode its constructor leaves it in, as "
                f"KernelBench runs it: its normalisation layers use {statistics} statistics."
            )
        if batch.free:
            notes.append(
                f"{BATCH}: leading axis of every input, varied by kernelaudit (sizes other than "
                f"{batch.size} take the first rows of get_inputs(), drawn again under further "
                "seeds where more rows are needed); other sizes held fixed, as the model "
                "hard-codes them."
            )
            if batch.minimum > 1:
                notes.append(
                    f"{BATCH}: the reference fails at batch size 1, so kernelaudit tries sizes "
                    f"from {batch.minimum}."
                )
        elif batch.size:
            notes.append(
                f"Every size is held fixed, as the model hard-codes them, the leading size "
                f"{batch.size} too: {batch.why}."
            )
        else:
            notes.append(f"Every size is held fixed: {batch.why}.")
        return notes


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(torch.allclose(a, b, rtol=0, atol=0, equal_nan=True))
    return bool(torch.equal(a, b))
