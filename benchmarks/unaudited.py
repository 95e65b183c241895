"""The SOL-ExecBench problems that no results file of `benchmarks/solexecbench_scale.py` in a
folder records as audited (or cut by a limit) in a profile: what a coverage run still owes.
With --summary, what the files record instead: how many problems are settled, owed or not
runnable here, and the median and 90th percentile of each settled problem's latest audit (a
problem cut by a limit counts as its limit, so both are lower bounds then; the records come from
different code and machines).

    python benchmarks/unaudited.py benchmarks/results build/solexecbench --profile default
    python benchmarks/unaudited.py benchmarks/results build/solexecbench --summary
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def _records(results: Path) -> Iterator[tuple[str, dict]]:
    """Every problem record of every results file in `results`, with its run's start."""
    for path in results.glob("solexecbench-scale-*.json"):
        record = json.loads(path.read_text())
        record = record.get("solexecbench-scale", record)
        if not isinstance(record, dict):
            continue
        when = f"{record.get('date', '')} {record.get('started', '')}"
        for problem in record.get("problems", []):
            yield when, problem


def latest(results: Path, profile: str) -> dict[str, dict]:
    """Each problem's latest record in `profile`, done or cut by a limit, by the run's start:
    the problems a coverage run owes nothing."""
    kept: dict[str, tuple[str, dict]] = {}
    for when, problem in _records(results):
        if problem.get("profile") != profile or problem.get("status") not in ("done", "timeout"):
            continue
        name = problem["problem"]
        if name not in kept or when >= kept[name][0]:
            kept[name] = (when, problem)
    return {name: problem for name, (_, problem) in kept.items()}


def _problems(root: Path) -> list[str]:
    return [
        f"{d.parent.parent.name}/{d.parent.name}" for d in sorted(root.glob("*/*/definition.json"))
    ]


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summary(results: Path, root: Path, profile: str) -> dict[str, object]:
    records = latest(results, profile)
    problems = _problems(root)
    unrunnable = {p["problem"] for _, p in _records(results) if p.get("status") == "not-runnable"}
    seconds = [
        max(float(r["seconds"]), float(r.get("limit_s") or 0.0))
        if r["status"] == "timeout"
        else float(r["seconds"])
        for r in records.values()
    ]
    return {
        "problems": len(problems),
        "settled": len(records),
        "cut by a limit": sum(r["status"] == "timeout" for r in records.values()),
        "not runnable here": len(unrunnable - set(records)),
        "owed": len(set(problems) - set(records) - unrunnable),
        "median_s": round(_percentile(seconds, 0.5), 2) if seconds else None,
        "p90_s": round(_percentile(seconds, 0.9), 2) if seconds else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("root", type=Path, help="folder holding <level>/<problem>/definition.json")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--summary", action="store_true", help="what the files record instead")
    args = parser.parse_args()
    if args.summary:
        print(json.dumps(summary(args.results, args.root, args.profile), indent=1))
        return
    seen = latest(args.results, args.profile)
    owed = "".join(f"{problem}\n" for problem in _problems(args.root) if problem not in seen)
    try:
        sys.stdout.write(owed)
        sys.stdout.flush()
    except BrokenPipeError:  # a reader that stopped early (`| head`) wanted no more
        # what is left in the buffer goes nowhere, rather than failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
