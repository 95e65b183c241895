"""Where a reference's native run first gives non-finite values that its float64 truth does not.

For every failing `numerics` or `gradients` finding of the given reports (each a reference
audited as its own candidate, `benchmarks/solexecbench_scale.py`) that counts NaN or inf where
the truth is finite, the case's inputs are drawn again and the problem's reference run twice
on the device under a recorder of every torch operation: at the inputs' native dtypes (as a
candidate's process runs it) and promoted to float64 (as the oracle's truth is). Operations are
matched by name and occurrence (the k-th convolution of one run with the k-th of the other:
the float64 run may add conversions), and the first operation of the native run whose results
hold more non-finite values than its float64 match is reported, with the shapes, dtypes,
non-finite counts and largest finite magnitudes of its tensor arguments and results.

    python benchmarks/first_nonfinite.py REPORT.json [REPORT.json ...] --out results.json
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import torch
from reference_defaults import failing_cases, run_over_reports
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from kernelaudit.findings import Finding
from kernelaudit.oracle.promote import promoted_copy, promoted_to_fp64
from kernelaudit.oracle.truth import native_copy

_SHOWN = 6
"""How many operations before the first divergent one are listed besides it."""


def _summary(value: object) -> dict[str, Any] | None:
    if not isinstance(value, torch.Tensor) or not value.is_floating_point():
        return None
    finite = torch.isfinite(value)
    largest = float(value[finite].abs().max()) if bool(finite.any()) else None
    return {
        "shape": list(value.shape),
        "dtype": str(value.dtype).removeprefix("torch."),
        "nonfinite": int((~finite).sum()),
        "largest finite": largest,
    }


class _Recorder(TorchDispatchMode):
    """Every operation's name and a summary of its tensor arguments and results."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[dict[str, Any]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        out = func(*args, **(kwargs or {}))
        self.ops.append(
            {
                "op": str(func),
                "arguments": [s for s in map(_summary, tree_leaves((args, kwargs))) if s],
                "results": [s for s in map(_summary, tree_leaves(out)) if s],
            }
        )
        return out


def _recorded(problem, inputs, config, device: str, float64: bool) -> list[dict[str, Any]]:
    args = [native_copy(inputs[s.name], config.get(s.name), device) for s in problem.inputs]
    recorder = _Recorder()
    with torch.no_grad():
        if float64:
            args = [promoted_copy(a) for a in args]
            with promoted_to_fp64(), recorder:
                problem.reference(*args)
        else:
            with recorder:
                problem.reference(*args)
    return recorder.ops


def _keyed(ops: list[dict[str, Any]]) -> list[tuple[tuple[str, int], dict[str, Any]]]:
    seen: Counter[str] = Counter()
    keyed = []
    for op in ops:
        keyed.append(((op["op"], seen[op["op"]]), op))
        seen[op["op"]] += 1
    return keyed


def _nonfinite(summaries: list[dict[str, Any]]) -> int:
    return sum(s["nonfinite"] for s in summaries)


def first_divergence(native: list[dict[str, Any]], wide: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the native run's non-finite values start: the first operation whose arguments hold
    as many non-finite values as its float64 match's and whose results hold more; where the
    matching fails (conversions the float64 run adds or drops), the first operation that makes
    non-finite results of finite arguments."""
    matches = dict(_keyed(wide))
    keyed = _keyed(native)
    found = None
    for position, (key, op) in enumerate(keyed):
        other = matches.get(key)
        if (
            other is not None
            and _nonfinite(op["arguments"]) == _nonfinite(other["arguments"])
            and _nonfinite(op["results"]) > _nonfinite(other["results"])
        ):
            found = (position, "its float64 match has fewer non-finite results", other)
            break
    if found is None:
        for position, (key, op) in enumerate(keyed):
            if not _nonfinite(op["arguments"]) and _nonfinite(op["results"]):
                found = (position, "non-finite results of finite arguments", matches.get(key))
                break
    if found is None:
        return {"position": None, "operations": len(native)}
    position, why, other = found
    return {
        "position": position,
        "operations": len(native),
        "why": why,
        "native": keyed[position][1],
        "float64": other,
        "operations before": [k[0] for k, _ in keyed[max(0, position - _SHOWN) : position]],
    }


def _with_nonfinite(finding: Finding) -> bool:
    return finding.check in ("numerics", "gradients") and "where the truth is finite" in (
        finding.title
    )


def investigate(report_path: Path, device: str) -> list[dict[str, Any]]:
    records = []
    for report, finding, problem, case, inputs, config in failing_cases(
        report_path, _with_nonfinite
    ):
        native = _recorded(problem, inputs, config, device, float64=False)
        wide = _recorded(problem, inputs, config, device, float64=True)
        where = torch.cuda.get_device_name(device) if device.startswith("cuda") else device
        record = {
            "problem": report.problem,
            "finding": f"{finding.check}: {finding.title[:300]}",
            "case": case.to_json(),
            "device": where,
            "first divergence": first_divergence(native, wide),
        }
        records.append(record)
        print(json.dumps(record, indent=1), flush=True)
    return records


def main() -> None:
    run_over_reports(__doc__.splitlines()[0], investigate)


if __name__ == "__main__":
    main()
