"""How hard an audit looks: `quick`, `default` and `thorough`."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from kernelaudit.errors import UsageError

USUAL_TRAINING_STEPS = {"cpu": 150, "cuda": 200}
"""The steps of each of the training check's runs at a profile's `training_length` of 1: the
tiny model on a CPU, the small one on a GPU (`training.loop.Experiment`)."""


def training_steps(device: str, length: float = 1.0) -> int:
    """The steps of each of the training check's runs on `device` at `length` times the usual
    (`USUAL_TRAINING_STEPS`)."""
    return round(USUAL_TRAINING_STEPS["cuda" if device.startswith("cuda") else "cpu"] * length)


@dataclass(frozen=True)
class Profile:
    name: str
    float_distributions: tuple[str, ...]
    index_distributions: tuple[str, ...]
    mask_distributions: tuple[str, ...]
    vary_weights: bool
    """Whether inputs with role "weight" are swept through the float distributions too (they
    always get their own default, never all ones)."""
    boundary_sizes_per_axis: int
    """How many boundary sizes each axis is tried at (besides its workload sizes)."""
    layouts: tuple[str, ...]
    """Non-contiguous layouts tried (each one input at a time), where the contract allows."""
    seeds: int
    """How many seeds each workload x distribution case is drawn with."""
    repeats: int
    """Calls on identical inputs for the determinism check."""
    shrink_budget: int
    """Most reruns spent shrinking one failing case."""
    timeout_s: float
    """Wall time one call of the candidate may take before it counts as hung."""
    budget_s: float = 30.0
    """The audit's target time per candidate on an H100, for problems up to SOL-ExecBench L1
    size. Cases that every audit needs (each value distribution, boundary size and layout at
    least once, every check's own probes) always run; the optional ones run, most revealing
    first, while the estimated time fits (`kernelaudit.inputs.cost`: an estimate, never the
    clock, so the cases run do not depend on how busy the host is). `--budget` overrides it."""
    warmup_calls: int = 20
    """Calls made before the judged one when looking for behaviour that changes after a
    warm-up (a call counter, a cache filled on the way)."""
    host_memory_bytes: int = 0
    """Host memory the candidate's processes may use; 0: half of the machine's."""
    gpu_memory_bytes: int = 0
    """Device memory the candidate may hold; 0: three quarters of what is free at the start."""
    train_broken: bool = True
    """Whether the training check also trains a candidate that already fails a check other than
    `numerics` or `execution`. Training answers whether an accuracy deviation matters; a
    candidate that mishandles a layout or an upstream gradient, leaves outputs unwritten or
    games a check is broken whatever training shows, so the quick profile spends no training
    time on it."""
    training_configs: int = 2
    """How many of the problem's dtype configurations the training check trains, in
    declaration order (0: all)."""
    training_length: float = 1.0
    """The training check's runs, as a share of the device's usual steps (`USUAL_TRAINING_STEPS`:
    150 on a CPU, 200 on a GPU): the quick profile trains for half of them. Below the usual
    steps the loss is reported, not judged, and the parameter drift decides
    (`training.envelope.Judgement`)."""
    gradient_depth: int = 4
    """How many times longer than at the workload the gradients check makes a reduced axis
    (the rows of a weight gradient, the tokens of an embedding gradient)."""
    invariance_configs: int = 0
    """How many of the problem's dtype configurations the batch-invariance check probes
    (0: all)."""
    invariance_axes: int = 0
    """How many batch axes the batch-invariance check probes, first first (0: all)."""
    invariance_rows: tuple[str, ...] = ("last", "middle")
    """Which rows the batch-invariance check computes alone: "last", "middle"."""
    race_runs: int = 20
    """Calls the races check makes while other kernels keep the GPU's SMs busy, each compared
    bit for bit with a call alone."""
    race_threads: int = 4
    """Host threads the races check has call the candidate at once, on streams of their own."""
    race_rounds: int = 2
    """How many times the races check's threads call the candidate together."""
    race_queued: int = 3
    """Calls the races check makes behind unrelated work still queued on the caller's stream,
    the inputs' values last in the queue."""
    large_tensors: bool = False
    """Whether the large-tensors check runs its case past 2^31 elements (on a GPU only, where
    the device's free memory allows it: one call, only the rows around the limit judged)."""
    sanitizer_tools: tuple[str, ...] = ("memcheck", "initcheck", "synccheck")
    """compute-sanitizer tools the sanitizer check runs on a CUDA device, in this order
    (racecheck is set apart, by `sanitizer_racecheck`)."""
    sanitizer_racecheck: str = "never"
    """When racecheck runs too: "never", "shared" (on the candidate's kernels known to use
    shared memory) or "shared-or-unknown" (also where the profiler could not say)."""
    sanitizer_cases: int = 2
    """Small cases the sanitizer runs (the first is the tail-sizes case)."""
    sanitizer_budget_s: float = 60.0
    """Wall time the sanitizer runs of one audit may take together at most (they go on beside
    the probes, which wait for them before measuring the device); a tool is skipped, or stopped
    and what it reported until then judged, once the budget is spent, and the report says so.
    Twice the audit's own budget in `default`, scaled with it by `--budget`: the tools take a
    few seconds on most problems, minutes on a layer of billions of weights."""
    interpreted_cases: int = 2
    """Boundary cases a Triton candidate is run at under Triton's interpreter with every memory
    access checked (the triton-bounds check): the cheapest of each axis, then each axis one
    past a power of two."""

    def __post_init__(self) -> None:
        unknown_rows = [r for r in self.invariance_rows if r not in ("last", "middle")]
        if unknown_rows or not self.invariance_rows:
            raise UsageError(
                f"profile {self.name!r}: invariance_rows is {self.invariance_rows!r}; name one "
                'or both of "last" and "middle"'
            )
        if not (math.isfinite(self.budget_s) and self.budget_s > 0.0):
            raise UsageError(
                f"profile {self.name!r}: budget_s is {self.budget_s}; give the seconds an "
                "audit of one candidate may plan for (30: the default profile's)"
            )
        if not self.training_length > 0.0:
            raise UsageError(
                f"profile {self.name!r}: training_length is {self.training_length}; give a "
                "positive share of the usual training steps (1.0: all of them)"
            )

    def trained_configs(self, configs: int) -> int:
        """How many of a problem's `configs` dtype configurations the training check trains."""
        return min(self.training_configs or configs, configs)

    def training_steps(self, device: str) -> int:
        """The steps of each of the training check's runs on `device`."""
        return training_steps(device, self.training_length)


_ALL_FLOATS = (
    "normal",
    "uniform",
    "offset",
    "heavy_tailed",
    "outlier_channels",
    "large",
    "tiny",
    "constant_rows",
    "small_integers",
    "nonfinite",
    "zero_rows",
    "neg_inf_rows",
    "peaked",
)
_ALL_INDICES = ("uniform", "zipf", "hot", "sorted", "boundary", "argmax")
_ALL_MASKS = ("random", "masked_rows", "all_kept")
_ALL_LAYOUTS = ("transposed", "permuted", "strided", "offset", "expanded")

PROFILES: dict[str, Profile] = {
    "quick": Profile(
        name="quick",
        float_distributions=("normal", "offset", "small_integers", "large", "zero_rows"),
        index_distributions=("uniform", "zipf", "hot"),
        mask_distributions=("random", "masked_rows"),
        vary_weights=False,
        boundary_sizes_per_axis=2,
        layouts=("transposed", "offset"),
        seeds=1,
        repeats=2,
        shrink_budget=8,
        timeout_s=60.0,
        budget_s=10.0,
        warmup_calls=8,
        train_broken=False,
        training_configs=1,
        training_length=0.5,
        gradient_depth=1,
        invariance_configs=1,
        invariance_axes=1,
        invariance_rows=("last",),
        race_runs=5,
        race_queued=1,
        sanitizer_tools=("memcheck",),
        sanitizer_cases=1,
        sanitizer_budget_s=30.0,
    ),
    "default": Profile(
        name="default",
        float_distributions=_ALL_FLOATS,
        index_distributions=_ALL_INDICES,
        mask_distributions=_ALL_MASKS,
        vary_weights=True,
        boundary_sizes_per_axis=4,
        layouts=_ALL_LAYOUTS,
        seeds=1,
        repeats=3,
        shrink_budget=24,
        timeout_s=120.0,
        large_tensors=True,
    ),
    "thorough": Profile(
        name="thorough",
        float_distributions=_ALL_FLOATS,
        index_distributions=_ALL_INDICES,
        mask_distributions=_ALL_MASKS,
        vary_weights=True,
        boundary_sizes_per_axis=8,
        layouts=_ALL_LAYOUTS,
        seeds=2,
        repeats=5,
        shrink_budget=48,
        timeout_s=300.0,
        budget_s=300.0,
        warmup_calls=50,
        training_configs=0,
        gradient_depth=16,
        race_runs=50,
        race_queued=10,
        large_tensors=True,
        interpreted_cases=4,
        sanitizer_racecheck="shared-or-unknown",
        sanitizer_budget_s=1200.0,
    ),
}


def profile_named(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise UsageError(f"unknown profile {name!r}; choose one of: {known}") from None


def profile_with_budget(name: str, budget_s: float | None) -> Profile:
    """The named profile, its time budget replaced by `budget_s` when one is given, and the
    sanitizer's in proportion."""
    profile = profile_named(name)
    if budget_s is None:
        return profile
    if not (math.isfinite(budget_s) and budget_s > 0):
        raise UsageError(f"--budget is {budget_s:g}; give a positive, finite number of seconds")
    share = profile.sanitizer_budget_s / profile.budget_s
    return replace(profile, budget_s=budget_s, sanitizer_budget_s=budget_s * share)
