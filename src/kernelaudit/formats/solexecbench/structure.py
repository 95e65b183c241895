"""Inputs whose values have a structure a caller always respects: softmax rows, rotary cos/sin
tables, dropout masks drawn at their rate, tensors computed from other inputs. Redrawing them
from kernelaudit's distributions one at a time would fail a correct candidate on inputs no
caller can produce, so they keep the values the benchmark's generator gives them.

Two sources say which inputs these are:
- a problem's `get_inputs`: an input is free when its value is one plain draw (`randn`,
  `randint`, `zeros`, ...) scaled or cast; anything computed from other tensors, or through an
  operation that shapes the values (softmax, cos, a comparison with a rate, a sort), has
  structure;
- for inputs the workloads mark `random` (no generator), the names SOL-ExecBench problems give
  structured tensors: `cos`/`sin` tables, attention probabilities, dropout masks, float
  positions and timesteps, rotary and sinusoidal frequencies, the standard deviations and
  their reciprocals a normalisation's forward saves for its backward. The reader's own
  generator then draws them with their structure.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from kernelaudit.inputs import draws

_DRAWS = frozenset(
    {
        "randn",
        "randn_like",
        "randint",
        "randint_like",
        "zeros",
        "zeros_like",
        "ones",
        "ones_like",
        "empty",
        "empty_like",
        "full",
        "full_like",
        "normal",
        "normal_",
        "uniform_",
    }
)
"""Calls whose values are one plain draw (or a constant fill) of the input's shape."""

_KEEPS = frozenset(
    {"to", "contiguous", "float", "half", "bfloat16", "double", "clone", "detach", "cuda", "cpu"}
)
"""Methods that change an input's dtype or storage, not its values' structure."""
_KEEPS_FLAG = frozenset({"requires_grad_"})

_ROTARY = re.compile(r"(^|_)(cos|sin)(_|$)")
_PROBABILITIES = re.compile(
    r"^(p_attn|attn_weights|attention_weights|attn_probs|attention_probs|softmax_out\w*)$"
)
_DROPOUT_MASK = re.compile(r"drop\w*mask|mask\w*drop")
_DROPOUT_RATE = re.compile(r"drop\w*(p|prob|rate)$|^p_drop\w*|^attention_dropout$")
_POSITIONS = re.compile(r"(^|_)(ids|pos|positions?|timesteps?)$")
_POSITIONS_DESCRIBED = re.compile(r"\b(position|timestep)s?\s+(ids?|indices|values)\b", re.I)
_FREQUENCIES = re.compile(r"^(inv_freqs?|freqs|frequencies)$")
_SCALE = re.compile(r"(^|_)(?P<inverse>r|inv_?)?std(_|$)")
SCALE_SAMPLES = 64
"""A saved standard deviation is drawn as the root mean square of this many unit normal
values (its reciprocal, for `rstd`): what a normalisation's forward saves for activations of
unit scale, the scale kernelaudit's default draws of the saved activations have."""
_MASK = re.compile(r"(^|_)mask(_|$)")
_FILLS = frozenset({"ones", "ones_like", "full", "full_like"})

KEPT_FROM_GENERATOR = frozenset({"positions", "frequencies"})
"""Kinds a generator that produces the input already draws in their range (it knows the grid or
the schedule): its values are kept rather than redrawn."""

POSITION_LIMIT = 1024
"""Positions are drawn below this. cos and sin of position x frequency, the angle rounded once
in float32, are off by about 2**-23 x position: at positions up to 2048 a float32
implementation is already at float32's error budget (2**-12), past it none can meet it. Real
callers stay in this range or compute in float64 (grid coordinates of an image, diffusion
timesteps up to 1000)."""
ROTARY_BASE = 10000.0


def generator_structure(source: str, entry: str) -> dict[str, str]:
    """For each input the generator `entry` in `source` returns with a structure, why."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    function = next(
        (f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name == entry), None
    )
    if function is None:
        return {}
    flow = _Flow(function)
    found: dict[str, str] = {}
    for name, value in flow.returned().items():
        why = flow.structure(value)
        if not why and _MASK.search(name) and flow.constant_fill(value):
            why = "a mask the generator fills with one value (drawn freely, it would not mask)"
        if why:
            found[name] = why
    return found


class _Flow:
    """What each local of a generator holds: its assignments, and which are tensors."""

    def __init__(self, function: ast.FunctionDef):
        self.function = function
        self.assigned: dict[str, list[ast.expr]] = {}
        self.edited: set[str] = set()
        for node in ast.walk(function):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    self._bind(target, node.value)
            elif isinstance(node, (ast.AugAssign, ast.AnnAssign)) and node.value is not None:
                self._bind(node.target, node.value, edit=isinstance(node, ast.AugAssign))
            elif isinstance(node, ast.For):
                self._bind(node.target, node.iter, edit=True)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                owner = node.func.value
                method = node.func.attr
                if (
                    isinstance(owner, ast.Name)
                    and method.endswith("_")
                    and method not in (_KEEPS_FLAG | {"normal_", "uniform_"})
                ):
                    self.edited.add(owner.id)

    def _bind(self, target: ast.expr, value: ast.expr, edit: bool = False) -> None:
        if isinstance(target, ast.Name):
            self.assigned.setdefault(target.id, []).append(value)
            if edit:
                self.edited.add(target.id)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name):
            self.edited.add(target.value.id)  # an element written: the rest keeps its draw
            self.assigned.setdefault(target.value.id, [])
        elif isinstance(target, (ast.Tuple, ast.List)):
            for element in target.elts:
                self._bind(element, value, edit=True)

    def returned(self) -> dict[str, ast.expr]:
        """The value behind each input name the generator returns."""
        found: dict[str, ast.expr] = {}
        for node in ast.walk(self.function):
            if isinstance(node, ast.Return) and node.value is not None:
                found.update(self._entries(node.value))
        return found

    def _entries(self, node: ast.expr) -> dict[str, ast.expr]:
        if isinstance(node, ast.Name) and len(self.assigned.get(node.id, [])) == 1:
            return self._entries(self.assigned[node.id][0])
        if isinstance(node, ast.Dict):
            return {
                key.value: value
                for key, value in zip(node.keys, node.values, strict=True)
                if isinstance(key, ast.Constant) and isinstance(key.value, str)
            }
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "dict"
        ):
            return {k.arg: k.value for k in node.keywords if k.arg}
        return {}

    def is_tensor(self, name: str, seen: frozenset[str] = frozenset()) -> bool:
        """Whether a local holds a tensor (as opposed to a size, a rate or a flag)."""
        if name in seen:
            return False
        return any(self._tensor_expr(v, seen | {name}) for v in self.assigned.get(name, []))

    def _tensor_expr(self, node: ast.expr, seen: frozenset[str]) -> bool:
        if isinstance(node, ast.Call):
            function = node.func
            if isinstance(function, ast.Attribute):
                root = function.value
                if isinstance(root, ast.Name) and root.id in ("torch", "F", "math", "random"):
                    return root.id in ("torch", "F") and function.attr not in ("finfo", "iinfo")
                return self._tensor_expr(root, seen)
            return False
        if isinstance(node, ast.Name):
            return self.is_tensor(node.id, seen)
        if isinstance(node, ast.BinOp):
            return self._tensor_expr(node.left, seen) or self._tensor_expr(node.right, seen)
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            return any(self._tensor_expr(side, seen) for side in sides)
        if isinstance(node, ast.UnaryOp):
            return self._tensor_expr(node.operand, seen)
        if isinstance(node, ast.Subscript):
            return self._tensor_expr(node.value, seen)
        if isinstance(node, ast.Attribute):
            return node.attr in ("T", "mT") and self._tensor_expr(node.value, seen)
        return False

    def constant_fill(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> bool:
        """Whether `node` is a tensor filled with one value (`ones`, `full`), cast or not."""
        if isinstance(node, ast.Name):
            values = self.assigned.get(node.id, [])
            if node.id in seen or node.id in self.edited or not values:
                return False
            return all(self.constant_fill(v, seen | {node.id}) for v in values)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in _FILLS:
                return True
            if node.func.attr in _KEEPS:
                return self.constant_fill(node.func.value, seen)
        return False

    def structure(self, node: ast.expr, seen: frozenset[str] = frozenset()) -> str:
        """Why the value of `node` has a structure ("" for one plain draw)."""
        if isinstance(node, ast.Name):
            if node.id in seen or not self.is_tensor(node.id):
                return ""
            if node.id in self.edited:
                return f"{node.id} is written after it is drawn"
            values = self.assigned.get(node.id, [])
            whys = [self.structure(v, seen | {node.id}) for v in values]
            return next((w for w in whys if w), "")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method = node.func.attr
            owner = node.func.value
            if method in _DRAWS:
                tensors = [a for a in node.args if self._tensor_expr(a, frozenset())]
                if method.endswith("_like") or not tensors:
                    return ""
                return f"{method} of another tensor"
            if method in _KEEPS or method in _KEEPS_FLAG:
                return self.structure(owner, seen)
            if isinstance(owner, ast.Name) and owner.id in ("torch", "F"):
                return f"computed with {owner.id}.{method}"
            return f"computed with .{method}()"
        if isinstance(node, ast.BinOp):
            tensors = [s for s in (node.left, node.right) if self._tensor_expr(s, frozenset())]
            if len(tensors) > 1:
                return "computed from other tensors"
            if not tensors:
                return ""
            return self.structure(tensors[0], seen)
        if isinstance(node, ast.UnaryOp):
            return self.structure(node.operand, seen)
        if isinstance(node, ast.Compare):
            return "a comparison (a mask drawn at a rate or a threshold)"
        if isinstance(node, ast.Subscript):
            return "a slice or selection of another tensor"
        if isinstance(node, (ast.IfExp, ast.ListComp, ast.GeneratorExp, ast.Lambda)):
            return "computed by the generator's own logic"
        return ""


# ---- structured inputs of problems without a generator ------------------------------------------


@dataclass(frozen=True)
class Structure:
    """How the reader draws a `random` input whose name says it has a structure.

    kind: "rotary" (a cos or sin table of position x inverse frequency, with `partner` the
        other table of the pair, drawn from the same angles), "probabilities" (softmax rows
        along the last axis), "dropout" (True with probability 1 - `rate`'s value), "positions"
        (float positions or timesteps: integers in [0, POSITION_LIMIT)), "frequencies" (the
        inverse frequencies base^(-i/n), i < n, of a rotary or sinusoidal embedding), "std" or
        "rstd" (a standard deviation a normalisation's forward saved, or its reciprocal: never
        negative, never past 1/sqrt(eps), so `large` or non-finite draws of it are values no
        caller passes).
    """

    kind: str
    partner: str = ""
    rate: str = ""

    def describe(self, name: str) -> str:
        if self.kind == "rotary":
            return f"{name}: a rotary table (cos/sin of position x inverse frequency)"
        if self.kind == "probabilities":
            return f"{name}: softmax rows along its last axis (attention probabilities)"
        if self.kind == "positions":
            return f"{name}: positions (whole numbers in [0, {POSITION_LIMIT}))"
        if self.kind == "frequencies":
            return f"{name}: inverse frequencies {ROTARY_BASE:g}^(-i/n), i < n"
        if self.kind in ("std", "rstd"):
            inverse = "reciprocal " if self.kind == "rstd" else ""
            return (
                f"{name}: a {inverse}standard deviation saved by a forward (of unit-scale "
                "activations, by its name)"
            )
        return f"{name}: a dropout mask kept with probability 1 - {self.rate}"


def named_structure(
    name: str, dtype: torch.dtype, shape: tuple[object, ...], others: Mapping[str, dict]
) -> Structure | None:
    """The structure a `random` input has by its name, given the other inputs' specs."""
    if not shape:
        return None
    if dtype.is_floating_point and _ROTARY.search(name):
        kind = _ROTARY.search(name)
        assert kind is not None
        swapped = "sin" if kind.group(2) == "cos" else "cos"
        partner = name[: kind.start(2)] + swapped + name[kind.end(2) :]
        spec = others.get(partner)
        if isinstance(spec, dict) and spec.get("shape") == list(shape):
            return Structure("rotary", partner=partner)
        return None
    if dtype.is_floating_point and _PROBABILITIES.match(name):
        return Structure("probabilities")
    described = str(others.get(name, {}).get("description", ""))
    if dtype.is_floating_point and (
        _POSITIONS.search(name) or _POSITIONS_DESCRIBED.search(described)
    ):
        return Structure("positions")
    if dtype.is_floating_point and len(shape) == 1 and _FREQUENCIES.match(name):
        return Structure("frequencies")
    scale = _SCALE.search(name) if dtype.is_floating_point else None
    if scale is not None:
        return Structure("rstd" if scale.group("inverse") else "std")
    if dtype == torch.bool and _DROPOUT_MASK.search(name):
        rates = [n for n, s in others.items() if s.get("shape") is None and _DROPOUT_RATE.search(n)]
        if len(rates) == 1:
            return Structure("dropout", rate=rates[0])
    return None


def draw_structured(
    structures: Mapping[str, Structure],
    shapes: Mapping[str, tuple[int, ...]],
    dtypes: Mapping[str, torch.dtype],
    scalars: Mapping[str, object],
) -> dict[str, torch.Tensor]:
    """Values for every structured input, drawn through the global generator (seeded by the
    caller, as the benchmark's own draws are; large ones on several cores, `inputs.draws`)."""
    values: dict[str, torch.Tensor] = {}
    for name, structure in structures.items():
        if name in values:
            continue
        shape, dtype = shapes[name], dtypes[name]
        if structure.kind == "rotary":
            angles = rotary_angles(shape)
            values[name] = _trig(name, angles).to(dtype)
            values[structure.partner] = _trig(structure.partner, angles).to(
                dtypes[structure.partner]
            )
        elif structure.kind == "probabilities":
            logits = draws.randn(shape, draws.from_global())
            values[name] = torch.softmax(logits, -1).to(dtype)
        elif structure.kind == "positions":
            values[name] = torch.randint(0, POSITION_LIMIT, shape).to(dtype)
        elif structure.kind == "frequencies":
            count = shape[0]
            exponents = torch.arange(count, dtype=torch.float64) / max(count, 1)
            values[name] = (ROTARY_BASE**-exponents).to(dtype)
        elif structure.kind in ("std", "rstd"):
            # the mean of n squared unit normals is Gamma(n/2, rate n/2)
            half = torch.tensor(SCALE_SAMPLES / 2, dtype=torch.float64)
            rms = torch.distributions.Gamma(half, half).sample(shape).sqrt()
            values[name] = (rms if structure.kind == "std" else 1.0 / rms).to(dtype)
        else:
            rate = float(scalars.get(structure.rate) or 0.0)  # type: ignore[arg-type]
            values[name] = draws.rand(shape, draws.from_global(), torch.float32) >= rate
    return values


def _trig(name: str, angles: torch.Tensor) -> torch.Tensor:
    match = _ROTARY.search(name)
    assert match is not None
    return torch.cos(angles) if match.group(2) == "cos" else torch.sin(angles)


def rotary_angles(shape: tuple[int, ...]) -> torch.Tensor:
    """Angles position x inverse frequency as rotary embeddings build them: positions along
    the second-last axis (from a random start), frequencies base^(-2i/d) along the last, its
    two halves equal (the usual cat(freqs, freqs))."""
    width = shape[-1]
    index = torch.arange(width, dtype=torch.float64) % max(width // 2, 1)
    frequencies = ROTARY_BASE ** (-2 * index / width)
    count = shape[-2] if len(shape) >= 2 else 1
    start = float(torch.randint(0, 4096, ()).item())
    positions = start + torch.arange(count, dtype=torch.float64)
    angles = positions[:, None] * frequencies[None, :]
    return angles.reshape(shape[-2:] if len(shape) >= 2 else shape).expand(shape).contiguous()
