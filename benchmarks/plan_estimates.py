"""What the planner plans for every runnable SOL-ExecBench problem, without running anything:
per problem, the probes every audit runs (rank 0) and their estimated seconds by check, the
probes the budget adds and leaves out, and the workload the checks depart from.

Usage (from the repository root; no GPU needed, the plan is made for the device named):

    python benchmarks/plan_estimates.py ../shared/solexecbench --out plan.json \\
        --profile default --device cuda [--only L1/083 L2/074 ...]

The estimates come from `kernelaudit.inputs.cost` (the model the budget plans with), so they
say how the plan's size changes between versions of the planner, not how long audits take.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext
from kernelaudit.checks.sweep import base_workload
from kernelaudit.engine.budget import fit, probe_seconds
from kernelaudit.errors import UsageError
from kernelaudit.formats import read_problem, unrunnable
from kernelaudit.profiles import profile_named

H100_SMS = 132


def plan_one(definition: Path, profile_name: str, device: str) -> dict:
    problem = read_problem(definition)
    why = unrunnable(problem)
    if why:
        return {"unrunnable": why}
    profile = profile_named(profile_name)
    ctx = PlanContext(problem, profile, device, H100_SMS, None)
    # a concluding check plans no probe, and may start its experiment when asked to plan
    probing = [check for check in build_checks() if not hasattr(check, "conclude")]
    fitted = fit([p for c in probing for p in c.plan(ctx)], problem, device, profile.budget_s)
    required: Counter[str] = Counter()
    for probe in fitted.probes:
        if probe.rank == 0:
            required[probe.check] += probe_seconds(problem, probe, device)
    names = [w.name for w in problem.workloads]
    return {
        "required_s": round(sum(required.values()), 2),
        "required_by_check": {k: round(v, 2) for k, v in required.most_common()},
        "required_probes": sum(1 for p in fitted.probes if p.rank == 0),
        "planned_s": round(fitted.estimate_s, 2),
        "planned_probes": len(fitted.probes),
        "untried_probes": len(fitted.untried),
        "required_cut": len(fitted.cut),
        # each cut probe's own estimate: probes on one run counted once each, so more than
        # the plan would have spent on them
        "required_cut_s": round(sum(probe_seconds(problem, p, device) for p in fitted.cut), 2),
        "base_workload": names.index(base_workload(ctx)) if names else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the SOL-ExecBench folder")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", nargs="+", help="plan the problems whose id holds one of these")
    args = parser.parse_args()
    problems: dict[str, dict] = {}
    began = time.perf_counter()
    for definition in sorted(args.root.glob("*/*/definition.json")):
        key = f"{definition.parent.parent.name}/{definition.parent.name}"
        if args.only and not any(part in key for part in args.only):
            continue
        try:
            problems[key] = plan_one(definition, args.profile, args.device)
        except UsageError as error:
            problems[key] = {"error": str(error)[:300]}
        print(key, problems[key].get("required_s", problems[key]), flush=True)
    planned = [p["required_s"] for p in problems.values() if "required_s" in p]
    summary = {
        "problems": len(planned),
        "median_required_s": round(statistics.median(planned), 2) if planned else None,
        "total_required_s": round(sum(planned), 1),
        "over_budget": sum(1 for s in planned if s > profile_named(args.profile).budget_s),
        "seconds": round(time.perf_counter() - began, 1),
    }
    record = {"profile": args.profile, "device": args.device, "summary": summary}
    args.out.write_text(json.dumps({**record, "problems": problems}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
