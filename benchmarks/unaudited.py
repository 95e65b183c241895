"""The SOL-ExecBench problems that no results file of `benchmarks/solexecbench_scale.py` in a
folder records as audited (or cut by a limit) in a profile: what a coverage run still owes.

    python benchmarks/unaudited.py benchmarks/results build/solexecbench --profile default
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def settled(results: Path, profile: str) -> set[str]:
    """Problems some results file in `results` records as done or timed out in `profile`."""
    seen: set[str] = set()
    for path in results.glob("solexecbench-scale-*.json"):
        record = json.loads(path.read_text())
        record = record.get("solexecbench-scale", record)
        for problem in record.get("problems", []) if isinstance(record, dict) else []:
            if problem.get("profile") == profile and problem.get("status") in ("done", "timeout"):
                seen.add(problem["problem"])
    return seen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("root", type=Path, help="folder holding <level>/<problem>/definition.json")
    parser.add_argument("--profile", default="default")
    args = parser.parse_args()
    seen = settled(args.results, args.profile)
    for definition in sorted(args.root.glob("*/*/definition.json")):
        problem = f"{definition.parent.parent.name}/{definition.parent.name}"
        if problem not in seen:
            print(problem)


if __name__ == "__main__":
    main()
