"""One training run: the model, a plug in one of its slots, an optimizer, a fixed token stream.

Every run of an experiment starts from the same parameters and sees the same batches, so runs
differ only in what is plugged into the slot: the reference, the reference nudged by one unit
in the last place, or the candidate.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from kernelaudit.errors import UsageError
from kernelaudit.oracle.promote import in_float64
from kernelaudit.oracle.rule import ACCUMULATION_NOISE_FACTOR
from kernelaudit.profiles import training_steps
from kernelaudit.training.model import ModelConfig, TinyDecoder
from kernelaudit.training.slots import Plug, Slots, failure_text

OPTIMIZERS: tuple[str, ...] = ("sgd", "adamw")


@dataclass(frozen=True)
class Experiment:
    """The fixed part of every run: model size, batches, steps, optimizers and their settings.

    Batches of about 2048 tokens make the most frequent ids occur hundreds of times per step,
    as in real pretraining batches. Free-running runs are chaotic at these settings (a few hundred
    steps amplify one ulp into a different trajectory); the parameter drift is therefore judged
    on runs that shadow the reference's trajectory (`shadow`), the loss on free-running ones.
    """

    config: ModelConfig
    steps: int
    batch: int
    seed: int = 0
    sgd_lr: float = 0.1
    adamw_lr: float = 3e-3
    weight_decay: float = 0.01
    perturbed_runs: int = 3
    """Reruns of the reference with every slot result nudged by the oracle's noise floor (one ulp
    for bf16 and fp16): the natural envelope."""

    @classmethod
    def for_device(cls, device: str, steps: int | None = None, length: float = 1.0) -> Experiment:
        """The tiny model on a CPU (seconds per run), the small one on a GPU. Without `steps`,
        `length` times the device's usual steps (150 on a CPU, 200 on a GPU)."""
        steps = steps or training_steps(device, length)
        if device.startswith("cuda"):
            return cls(ModelConfig.small(), steps=steps, batch=64)
        return cls(ModelConfig.tiny(), steps=steps, batch=128)


@dataclass(frozen=True)
class Trajectory:
    """What one run produced: the loss at every step and the final parameters (CPU, fp32)."""

    optimizer: str
    losses: tuple[float, ...]
    parameters: Mapping[str, torch.Tensor] = field(default_factory=dict)
    slot_calls: int = 0
    """How many times the plugged slot ran: proof the plug was exercised."""
    error: str = ""
    """Why the run stopped early ("" when it finished)."""


_REFERENCE_RUNS = threading.Lock()
"""Held while the problem's reference runs. An experiment trains the reference's runs and the
candidate's side by side in two threads, and a reference may keep state of its own (a cache,
a counter) that two threads would share. Its float64 runs (`Rounded`) switch nothing of the
process's (`promoted_to_fp64(process_wide=False)`): the other thread's model, optimizer and
tensors keep torch's default dtype and precision flags (an AdamW made while the default dtype
is float64 keeps its step count in float64)."""


class Native:
    """A slot function run as it is, one reference call at a time (`_REFERENCE_RUNS`)."""

    def __init__(self, function: Callable[..., object]) -> None:
        self.function = function

    def __call__(self, *args: object) -> object:
        with _REFERENCE_RUNS:
            return self.function(*args)


class Rounded:
    """A slot function whose results are the correctly rounded ones: the function runs on the
    slot's arguments promoted to float64 (as the oracle's truth does) and is rounded to the
    dtypes its native run returns.

    It is the centre shadowing runs measure drift from. The reference run natively is itself
    a correct kernel a few ulps off wherever it accumulates many terms (fp32 sums over
    thousands of rows); measured from it, an equally correct candidate would carry the
    reference's error on top of its own.
    """

    def __init__(self, function: Callable[..., object]) -> None:
        self.function = function
        self.calls = 0
        self._dtypes: dict[tuple[object, ...], tuple[torch.dtype, ...] | torch.dtype] = {}
        """The dtypes of the native results, by the arguments' dtypes, shapes and values, for
        functions whose every result is a floating tensor: the native run is then not made
        again."""

    def __call__(self, *args: object) -> object:
        with _REFERENCE_RUNS:
            return self._rounded(args)

    def _rounded(self, args: tuple[object, ...]) -> object:
        key = _signature(args)
        known = self._dtypes.get(key) if key is not None else None
        if known is None:
            native = self.function(*args)
            known = _floating_dtypes(native)
            if key is not None and known is not None:
                self._dtypes[key] = known
        truth = in_float64(self.function, args)
        self.calls += 1
        if known is None:  # a result that is not a floating tensor keeps its native value
            if isinstance(native, tuple):
                assert isinstance(truth, tuple)
                return tuple(
                    self._kept(n, t, k) for k, (n, t) in enumerate(zip(native, truth, strict=True))
                )
            return self._kept(native, truth, 0)
        if isinstance(known, tuple):
            assert isinstance(truth, tuple)
            return tuple(
                self._round(d, t, k) for k, (d, t) in enumerate(zip(known, truth, strict=True))
            )
        assert isinstance(truth, torch.Tensor)
        return self._round(known, truth, 0)

    def _kept(self, native: object, truth: object, index: int) -> object:
        if not isinstance(native, torch.Tensor) or not native.is_floating_point():
            return native
        assert isinstance(truth, torch.Tensor)
        return self._round(native.dtype, truth, index)

    def _round(self, dtype: torch.dtype, truth: torch.Tensor, index: int) -> torch.Tensor:
        return truth.to(dtype)


def _signature(args: Sequence[object]) -> tuple[object, ...] | None:
    """What a deterministic function's result dtypes can depend on: each tensor's dtype, shape
    and device, each plain value itself; None where an argument is neither."""
    key: list[object] = []
    for a in args:
        if isinstance(a, torch.Tensor):
            key.append((a.dtype, tuple(a.shape), a.device))
        elif a is None or isinstance(a, (bool, int, float, str)):
            key.append((type(a), a))
        else:
            return None
    return tuple(key)


def _floating_dtypes(native: object) -> tuple[torch.dtype, ...] | torch.dtype | None:
    """The dtype of each result where every result is a floating tensor, else None."""
    results = native if isinstance(native, tuple) else (native,)
    if not all(isinstance(r, torch.Tensor) and r.is_floating_point() for r in results):
        return None
    dtypes = tuple(r.dtype for r in results if isinstance(r, torch.Tensor))
    return dtypes if isinstance(native, tuple) else dtypes[0]


class Perturbed(Rounded):
    """A slot function whose results are the correctly rounded ones moved up or down at random:
    what a correct kernel that rounds differently may return.

    The step is the oracle's noise floor (`kernelaudit.oracle.rule`): one unit in the last
    place, or the reordering noise of a float32 accumulation (`ACCUMULATION_NOISE_FACTOR`
    float32 roundings) where that is larger. For bf16 and fp16 results that is one ulp; a
    float32 result of a sum over thousands of rows is legitimately several ulps off in any
    summation order, which a one-ulp envelope would count against a correct kernel.
    """

    def __init__(self, function: Callable[..., object], seed: int) -> None:
        super().__init__(function)
        self.seed = seed

    def _round(self, dtype: torch.dtype, truth: torch.Tensor, index: int) -> torch.Tensor:
        rounded = super()._round(dtype, truth, index)
        generator = torch.Generator(device=rounded.device)
        generator.manual_seed(self.seed * 1_000_003 + self.calls * 7 + index)
        up = torch.rand(rounded.shape, generator=generator, device=rounded.device) < 0.5
        moved = torch.nextafter(rounded, _towards(up, rounded.dtype))
        steps = noise_ulps(rounded.dtype)
        if steps == 1:
            return moved
        ulp = (moved.double() - rounded.double()).nan_to_num(0.0, 0.0, 0.0)
        return (rounded.double() + steps * ulp).to(rounded.dtype)


def _towards(up: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """+inf where `up`, -inf elsewhere, at `dtype`: the values of `torch.where(up, inf, -inf)`,
    whose broadcast of two 0-dim tensors costs three to five times this arithmetic on a CPU
    (2 ms against 0.4-0.7 ms for the half million elements of a cross-entropy gradient of the
    CPU's model, per slot call of every perturbed run)."""
    return up.to(dtype).mul_(2.0).sub_(1.0).mul_(math.inf)


class Biased(Rounded):
    """A slot function whose results are the correctly rounded ones moved one unit in the last
    place up, every one of them, wherever the oracle's noise floor is wider than one ulp (float32
    results); bf16 and fp16 results stay correctly rounded.

    A correct float32 kernel is not only noisy but may be biased by a fraction of an ulp:
    approximate exponentials and reciprocals, contracted multiply-adds. The perturbed runs move
    results at random, and random moves cancel in what the model sums over tokens and steps (a
    norm weight's gradient), while a bias adds up: measured against them alone, a correct
    float32 kernel whose results are a third of an ulp high on average departs. This run is
    the envelope's member for that. For bf16 and fp16 results, rounding one way is a bias of
    half an ulp that a correct kernel does not have (it is what truncating instead of rounding
    costs), so none is allowed there.
    """

    def _round(self, dtype: torch.dtype, truth: torch.Tensor, index: int) -> torch.Tensor:
        rounded = super()._round(dtype, truth, index)
        if noise_ulps(rounded.dtype) == 1:
            return rounded
        infinity = torch.tensor(float("inf"), dtype=rounded.dtype, device=rounded.device)
        return torch.nextafter(rounded, infinity)


def biased_member(results: Sequence[torch.dtype]) -> bool:
    """Whether an envelope for a slot whose results have dtypes `results` needs a `Biased`
    run: some floating result has a noise floor wider than one ulp."""
    return any(d.is_floating_point and noise_ulps(d) > 1 for d in results)


def noise_ulps(dtype: torch.dtype) -> int:
    """How many units in the last place of `dtype` the envelope moves a result: the oracle's
    floor, max(u(dtype), ACCUMULATION_NOISE_FACTOR * u(accumulator)), in ulps of `dtype`."""
    accumulator = torch.float64 if torch.finfo(dtype).bits > 32 else torch.float32
    ratio = ACCUMULATION_NOISE_FACTOR * torch.finfo(accumulator).eps / torch.finfo(dtype).eps
    return max(1, round(ratio))


def train(
    experiment: Experiment,
    optimizer: str,
    plug: Plug | None,
    tokens: torch.Tensor,
    device: str,
) -> Trajectory:
    """Train from the experiment's initial parameters on `tokens` ([steps, batch, seq + 1])."""
    torch.manual_seed(experiment.seed)
    slots = Slots(plug)
    model = TinyDecoder(experiment.config, slots, seed=experiment.seed).to(device)
    if optimizer == "sgd":
        step: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=experiment.sgd_lr)
    elif optimizer == "adamw":
        step = torch.optim.AdamW(
            model.parameters(), lr=experiment.adamw_lr, weight_decay=experiment.weight_decay
        )
    else:
        raise UsageError(f"unknown optimizer {optimizer!r}; use one of: {', '.join(OPTIMIZERS)}")
    losses: list[float] = []
    error = ""
    for batch in tokens.to(device):
        step.zero_grad(set_to_none=True)
        try:
            loss = model(batch)
            loss.backward()
        except Exception as failure:  # the plugged kernel's failure, reported by the check
            error = f"step {len(losses)}: {failure_text(failure)}"
            break
        losses.append(float(loss.detach()))
        if not torch.isfinite(loss):
            error = f"step {len(losses) - 1}: the loss is {losses[-1]}"
            break
        step.step()
    parameters = {n: p.detach().to("cpu", copy=True) for n, p in model.named_parameters()}
    calls = slots.calls[plug.slot] if plug is not None else 0
    return Trajectory(optimizer, tuple(losses), parameters, calls, error)
