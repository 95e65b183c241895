"""What a guard leaves behind: a record per failing call, with its real inputs, that
`kernelaudit repro` replays; and a summary of everything it checked.

A record is a JSON file naming the kernel and the reference (file and function), the call,
why it was checked and what the oracle said of each output, beside a safetensors file with
the call's tensor inputs (scalars stay in the JSON). Inputs larger than the guard's bound
are not kept, and the record says so.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save

from kernelaudit.errors import UsageError
from kernelaudit.guarding.judged import CallVerdict, tensor_bytes
from kernelaudit.report.seal import write_atomically

RECORD_KIND = "kernelaudit-guard-failure"


@dataclass(frozen=True)
class Located:
    """Where a function can be imported from again: its file and its name there."""

    file: str
    function: str

    @classmethod
    def of(cls, function: Callable[..., object]) -> Located | None:
        """Where `function` was defined, where it has a file and a plain name (not a lambda
        or a nested function)."""
        try:
            file = inspect.getsourcefile(function)
        except TypeError:
            return None
        name = getattr(function, "__qualname__", "")
        if file is None or not name.isidentifier():
            return None
        return cls(str(Path(file).resolve()), name)


@dataclass(frozen=True)
class Failure:
    """A checked call that failed, and what it left behind."""

    guard: str
    verdict: CallVerdict
    record: str = ""
    """The record's JSON file ("" where the guard writes none)."""
    occurrences: tuple[tuple[str, int, int], ...] = ()
    """For each integer input and failing output with a worst row: (input, row, how many of
    the input's elements hold that row's index). For an embedding gradient, how often the
    token of the worst row occurred in the call."""

    def describe(self) -> str:
        failing = [o for o in self.verdict.outputs if not o.passed]
        said = "; ".join(o.reason for o in failing) or self.verdict.error
        where = f" (record: {self.record})" if self.record else ""
        return f"{self.guard}: call {self.verdict.call} ({self.verdict.why}) failed: {said}{where}"


def occurrences(args: Sequence[object], verdict: CallVerdict) -> tuple[tuple[str, int, int], ...]:
    """How often each failing output's worst row occurs as a value of each integer input."""
    found = []
    for output in verdict.outputs:
        if output.passed or output.worst_row is None:
            continue
        for position, value in enumerate(args):
            if _indices(value):
                count = int((value == output.worst_row).sum())
                found.append((f"argument {position}", output.worst_row, count))
    return tuple(found)


def _indices(value: object) -> bool:
    """Whether `value` is a tensor of integers (what may hold a row's index)."""
    if not isinstance(value, torch.Tensor):
        return False
    dtype = value.dtype
    return not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool)


def write_record(
    folder: Path,
    guard: str,
    verdict: CallVerdict,
    args: Sequence[object],
    kernel: Located | None,
    reference: Located | None,
    most_bytes: int,
) -> Path:
    """Write the record of a failing call into `folder`; its JSON file."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{_file_name(guard)}-call{verdict.call}"
    tensors = {f"argument {i}": a for i, a in enumerate(args) if isinstance(a, torch.Tensor)}
    size = tensor_bytes(list(tensors.values()))
    kept = size <= most_bytes
    if kept and tensors:
        saved = save(
            # copies of their own: arguments that share memory are saved apart
            {k: t.detach().to("cpu", copy=True).contiguous() for k, t in tensors.items()}
        )
        write_atomically(folder / f"{stem}.safetensors", saved)
    arguments: list[dict[str, Any]] = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            arguments.append(
                {"tensor": f"argument {i}", "shape": list(a.shape), "dtype": str(a.dtype)}
            )
        else:
            arguments.append({"value": a if _plain(a) else repr(a)})
    record = {
        "kind": RECORD_KIND,
        "guard": guard,
        "call": verdict.call,
        "why": verdict.why,
        "kernel": asdict(kernel) if kernel else None,
        "reference": asdict(reference) if reference else None,
        "device": _device_of(args),
        "arguments": arguments,
        "tensors": f"{stem}.safetensors" if kept and tensors else None,
        "not_kept": ""
        if kept
        else f"the inputs take {size:,} bytes, more than the guard keeps "
        f"({most_bytes:,}); raise `keep_bytes` to keep them",
        "outputs": [{k: _finite(v) for k, v in asdict(o).items()} for o in verdict.outputs],
        "error": verdict.error,
    }
    path = folder / f"{stem}.json"
    write_atomically(path, json.dumps(record, indent=1, default=repr, allow_nan=False) + "\n")
    return path


def is_record(path: Path) -> bool:
    """Whether `path` is a JSON file a guard wrote (and not a report)."""
    try:
        with path.open() as file:
            head = file.read(4096)
    except OSError:
        return False
    return f'"kind": "{RECORD_KIND}"' in head


def read_record(path: Path) -> tuple[dict[str, Any], list[object]]:
    """A record and the call's arguments (tensors loaded on the CPU). UsageError when the
    file is not a guard's record, or its inputs were not kept."""
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise UsageError(f"{path}: not a readable JSON file ({error})") from None
    if not isinstance(record, dict) or record.get("kind") != RECORD_KIND:
        raise UsageError(f'{path}: not a record a guard wrote (no "kind": "{RECORD_KIND}")')
    if record.get("tensors") is None and any("tensor" in a for a in record["arguments"]):
        raise UsageError(f"{path}: the call's inputs were not kept: {record.get('not_kept')}")
    tensors = load_file(str(path.parent / record["tensors"])) if record.get("tensors") else {}
    args = [tensors[a["tensor"]] if "tensor" in a else a["value"] for a in record["arguments"]]
    return record, args


@dataclass
class Summary:
    """Everything a guard saw: calls, checks, failures and the worst errors, by output."""

    guard: str
    calls: int = 0
    checked: int = 0
    failed: int = 0
    unjudged: int = 0
    """Checked calls the reference could not judge (it raised, or returned other outputs)."""
    too_large: int = 0
    """Sampled calls not checked: their inputs were past the guard's bound."""
    behind: int = 0
    """Sampled calls not checked: too many checks were still waiting (`guard.MAX_PENDING`)."""
    latest: int = 0
    """The most calls the kernel had made past a checked call when that call's verdict came:
    how far behind the job the checks ran, in calls (a training step's in steps, where the
    kernel is called once a step)."""
    slowest: float = 0.0
    """The longest a check took, in seconds."""
    worst: dict[str, tuple[float, int | None, int]] = field(default_factory=dict)
    """By output: (the worst error ratio seen, its row, its call)."""
    failing_rows: dict[str, dict[int, int]] = field(default_factory=dict)
    """By output: how many failing calls had their worst error in each row."""
    failures: list[Failure] = field(default_factory=list)

    def add(self, verdict: CallVerdict, failure: Failure | None) -> None:
        self.checked += 1
        self.latest = max(self.latest, self.calls - verdict.call)
        self.slowest = max(self.slowest, verdict.seconds)
        if verdict.error:
            self.unjudged += 1
        for output in verdict.outputs:
            ratio = output.error_ratio if math.isfinite(output.error_ratio) else math.inf
            if ratio >= self.worst.get(output.name, (-1.0, None, 0))[0]:
                self.worst[output.name] = (ratio, output.worst_row, verdict.call)
            if not output.passed and output.worst_row is not None:
                rows = self.failing_rows.setdefault(output.name, {})
                rows[output.worst_row] = rows.get(output.worst_row, 0) + 1
        if failure is not None:
            self.failed += 1
            self.failures.append(failure)

    def to_json(self) -> dict[str, Any]:
        return {
            "guard": self.guard,
            "calls": self.calls,
            "checked": self.checked,
            "failed": self.failed,
            "unjudged": self.unjudged,
            "too_large": self.too_large,
            "behind": self.behind,
            "latest": self.latest,
            "slowest_s": self.slowest,
            "worst": {
                name: {"error_ratio": _finite(ratio), "row": row, "call": call}
                for name, (ratio, row, call) in self.worst.items()
            },
            "failing_rows": {
                name: dict(sorted(rows.items(), key=lambda r: -r[1])[:20])
                for name, rows in self.failing_rows.items()
            },
            "failures": [
                {
                    "call": f.verdict.call,
                    "said": f.describe(),
                    "record": f.record,
                    "occurrences": [list(o) for o in f.occurrences],
                }
                for f in self.failures
            ],
        }

    def describe(self) -> str:
        lines = [
            f"{self.guard}: {self.calls} call(s), {self.checked} checked, {self.failed} failed"
            + (f", {self.unjudged} not judged" if self.unjudged else "")
            + (f", {self.too_large} too large to check" if self.too_large else "")
            + (f", {self.behind} not checked while checks were behind" if self.behind else "")
        ]
        for name, (ratio, row, call) in self.worst.items():
            at = f" in row {row}" if row is not None else ""
            lines.append(f"  {name}: worst error {ratio:.3g}x the allowed noise{at} (call {call})")
        for name, rows in self.failing_rows.items():
            top = sorted(rows.items(), key=lambda r: -r[1])[:5]
            listed = ", ".join(f"row {r} ({n} call(s))" for r, n in top)
            lines.append(f"  {name}: failing rows {listed}")
        return "\n".join(lines)


def _plain(value: object) -> bool:
    return value is None or isinstance(value, (bool, int, float, str))


def _device_of(args: Sequence[object]) -> str:
    devices = {str(a.device) for a in args if isinstance(a, torch.Tensor)}
    return devices.pop() if len(devices) == 1 else "cpu"


def _file_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in name) or "guard"


def _finite(value: object) -> object:
    """`value`, with a float that is not finite written as text (strict JSON has no NaN)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
