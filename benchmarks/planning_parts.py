"""Where an audit's planning goes, check by check: SOL-ExecBench problems, each with its own
reference as the candidate (the shim `solexecbench_scale.py` writes), every check's `plan`
timed on its own, in the order an audit plans them. The concluding checks start their
experiments there (the sanitizer's runs, the interpreted bounds run): what they do before
returning is what the audit waits for.

    python benchmarks/planning_parts.py SOLEXECBENCH_ROOT L1/092_ L2/059_ --device cuda \
        [--profile default] [--out planning.json]

The experiments started are not waited for: the process ends as soon as the last problem is
planned (their children end with it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from solexecbench_scale import problem_folders, problem_id, write_shim

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext
from kernelaudit.engine.audit import resolve_device, sm_count
from kernelaudit.formats import read_candidate, read_problem
from kernelaudit.profiles import profile_named


def planned(folder: Path, profile: str, device: str, shims: Path) -> dict[str, object]:
    problem = read_problem(folder)
    problem, candidate = read_candidate(str(write_shim(folder, shims)), problem)
    ctx = PlanContext(problem, profile_named(profile), device, sm_count(device), candidate)
    seconds: dict[str, float] = {}
    for check in build_checks():
        began = time.perf_counter()
        check.plan(ctx)
        seconds[check.name] = round(time.perf_counter() - began, 3)
    slowest = dict(sorted(seconds.items(), key=lambda item: -item[1])[:5])
    return {
        "problem": problem_id(folder),
        "planning_s": round(sum(seconds.values()), 3),
        "slowest": slowest,
        "checks": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("problems", nargs="+", help="prefixes of level/problem names")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = resolve_device(args.device)
    folders = problem_folders(args.root)
    rows = []
    with tempfile.TemporaryDirectory() as shims:
        for prefix in args.problems:
            for folder in (f for f in folders if problem_id(f).startswith(prefix)):
                row = planned(folder, args.profile, device, Path(shims))
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.out:
        args.out.write_text(
            json.dumps({"device": device, "profile": args.profile, "problems": rows}, indent=1)
        )
    sys.stdout.flush()
    os._exit(0)  # the experiments started are not waited for


if __name__ == "__main__":
    main()
