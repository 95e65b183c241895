"""Load every SOL-ExecBench problem in a folder and run each runnable reference in float64 (the
truth) and at its own dtypes (the baseline) at its smallest workload, with the benchmark's own
inputs. Problems that cannot run here are listed with the reason.

    python benchmarks/solexecbench_references.py ../shared/solexecbench --out refs.json
"""

from __future__ import annotations

import argparse
import json
import math
import signal
import time
import traceback
from pathlib import Path

import torch

from kernelaudit.formats import read_problem, unrunnable
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.oracle.truth import expected
from kernelaudit.problem.dims import resolve_shape
from kernelaudit.problem.spec import Problem, Workload

GIB = 1 << 30


def smallest_workload(problem: Problem) -> Workload:
    return min(problem.workloads, key=lambda w: math.prod(max(s, 1) for _, s in w.sizes))


def float64_bytes(problem: Problem) -> int:
    """The bytes of every tensor input at the smallest workload, in float64: what the truth
    run holds before the reference computes anything."""
    return sum(count * 8 for count in _elements(problem).values())


def _elements(problem: Problem) -> dict[str, int]:
    """Each tensor input's element count at the smallest workload."""
    sizes = dict(smallest_workload(problem).sizes)
    return {t.name: math.prod(resolve_shape(t.shape, sizes)) for t in problem.tensor_inputs}


def too_large(problem: Problem, device: str) -> str | None:
    """Why the truth run cannot fit on `device`, or None: the float64 inputs, plus the native
    copy each is made from (one at a time), against the device's whole memory. What the
    reference allocates as it runs is not counted; a run that needs more reports running out
    of memory."""
    if not device.startswith("cuda"):
        return None
    config = problem.dtype_configs()[0]
    largest = max(
        (count * config[name].itemsize for name, count in _elements(problem).items()), default=0
    )
    needed = float64_bytes(problem) + largest
    total = torch.cuda.get_device_properties(torch.device(device)).total_memory
    if needed <= total:
        return None
    return (
        f"float64 inputs at the smallest workload need {needed / GIB:.1f} GiB with the largest "
        f"native copy; {torch.cuda.get_device_name(torch.device(device))} has "
        f"{total / GIB:.1f} GiB"
    )


def _overran(signum: int, frame: object) -> None:
    raise TimeoutError("the reference ran past the time limit")


def run_one(folder: Path, device: str, limit_s: int) -> dict[str, object]:
    began = time.perf_counter()
    entry: dict[str, object] = {"problem": f"{folder.parent.name}/{folder.name}"}
    try:
        problem = read_problem(folder)
    except Exception as error:  # a problem that does not load is the finding here
        entry.update(status="load error", reason=f"{type(error).__name__}: {error}")
        return entry
    entry["loaded_s"] = round(time.perf_counter() - began, 3)
    reason = unrunnable(problem) or too_large(problem, device)
    if reason is not None:
        entry.update(status="not runnable here", reason=reason)
        return entry
    smallest = smallest_workload(problem)
    case = Case(smallest.sizes, 0, (), (), 0, smallest.name)
    signal.alarm(limit_s)
    try:
        inputs = materialize(problem, case)
        config = problem.dtype_configs()[0]
        result = expected(problem, inputs, config, device)
        truth_dtypes = sorted({str(t.dtype) for t in result.truth})
        entry.update(status="ran in float64", truth_dtypes=truth_dtypes, workload=smallest.name)
    except torch.OutOfMemoryError as error:
        entry.update(status="out of device memory", reason=str(error).splitlines()[0][:400])
    except Exception as error:
        entry.update(
            status="reference failed",
            reason=f"{type(error).__name__}: {error}"[:600],
            where=traceback.format_exc(limit=-2)[-800:],
        )
    finally:
        signal.alarm(0)
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
    entry["seconds"] = round(time.perf_counter() - began, 3)
    return entry


def _size_on_load(folder: Path) -> int:
    try:
        return float64_bytes(read_problem(folder))
    except Exception:
        return 0  # a problem that does not load is reported when its turn comes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding <subset>/<problem>/definition.json")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, help="write every problem's entry as JSON")
    parser.add_argument("--only", nargs="+", help="run the problems whose path holds one of these")
    parser.add_argument("--limit-s", type=int, default=60, help="time limit per reference")
    parser.add_argument(
        "--skip", type=Path, help="an earlier --out file, or a kept record: its problems are kept"
    )
    args = parser.parse_args()
    folders = sorted(p.parent for p in args.root.glob("*/*/definition.json"))
    if args.only:
        folders = [f for f in folders if any(part in str(f) for part in args.only)]
    earlier = json.loads(args.skip.read_text()) if args.skip else []
    # an --out file is a list of entries; a kept record (benchmarks/results) holds them under
    # "problems"
    entries = earlier.get("problems", []) if isinstance(earlier, dict) else earlier
    done = {str(e["problem"]) for e in entries}
    signal.signal(signal.SIGALRM, _overran)
    folders.sort(key=_size_on_load)
    for folder in folders:
        if f"{folder.parent.name}/{folder.name}" in done:
            continue
        entry = run_one(folder, args.device, args.limit_s)
        entries.append(entry)
        print(json.dumps(entry), flush=True)
        if args.out:
            args.out.write_text(json.dumps(entries, indent=1))
    counts: dict[str, int] = {}
    for entry in entries:
        counts[str(entry["status"])] = counts.get(str(entry["status"]), 0) + 1
    named = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    print(json.dumps({"device": named, "torch": torch.__version__, "counts": counts}))


if __name__ == "__main__":
    main()
