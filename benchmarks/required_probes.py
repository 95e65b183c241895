"""What every audit of each SOL-ExecBench problem runs whatever its budget (the probes of rank
0), and what the budget adds, as the planner of the code on PYTHONPATH plans them: to check
that a change to the cost model or the planner's shares leaves the required probes as they
were, run it with the old code and the new, then compare.

    PYTHONPATH=old/src python benchmarks/required_probes.py build/solexecbench --out old.json
    PYTHONPATH=src python benchmarks/required_probes.py build/solexecbench --out new.json
    python benchmarks/required_probes.py --compare old.json new.json

Each plan also records its required probes' estimated seconds by where their cases' sizes come
from (the workloads, the boundary shapes, the held-back shapes); `--origins new.json` gives the
median shares. Plans are made for a GPU (`--device cuda`, 132 SMs as an H200 has), the
candidate being the problem's reference; nothing runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from kernelaudit.checks.base import PlanContext, Probe
from kernelaudit.engine.budget import fit_ahead, probe_seconds
from kernelaudit.errors import UsageError
from kernelaudit.formats.readers import read_problem
from kernelaudit.problem.spec import Problem
from kernelaudit.profiles import PROFILES


def plans(root: Path, device: str, profiles: list[str]) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = {}
    for definition in sorted(root.glob("*/*/definition.json")):
        name = f"{definition.parent.parent.name}/{definition.parent.name}"
        try:
            problem = read_problem(definition)
        except (UsageError, OSError) as error:
            result[name] = {"error": str(error)}
            continue
        for profile in profiles:
            ctx = PlanContext(problem, PROFILES[profile], device, 132)
            try:
                fitted = fit_ahead(ctx)
            except Exception as error:  # a plan this host cannot make (an nvfp4 dtype on a CPU)
                result[f"{name} {profile}"] = {"error": f"{type(error).__name__}: {error}"}
                continue
            # every rank-0 probe, those cut past ten budgets too (`FittedPlan.cut`), so that
            # plans compare across versions whatever the budget leaves out
            required = sorted(
                json.dumps([p.check, p.case.to_json(), p.plan.to_json()], sort_keys=True)
                for p in (*fitted.probes, *fitted.cut)
                if p.rank == 0
            )
            result[f"{name} {profile}"] = {
                "required": required,
                "optional taken": len(fitted.probes) - len(required),
                "estimate_s": round(fitted.estimate_s, 3),
                "required_s_by_origin": by_origin(problem, fitted.probes, device),
            }
    return result


ORIGINS = ("workload", "boundary", "held-back", "far past")
"""Where a case's sizes come from: a workload, else the prefix of its label."""


def by_origin(problem: Problem, probes: tuple[Probe, ...], device: str) -> dict[str, float]:
    """The required probes' estimated seconds by where their cases' sizes come from: the
    workloads, the boundary shapes around the base workload, the held-back shapes; calls
    made twice (probes of several checks on one run) counted once, as the budget counts them."""
    seconds: dict[str, float] = {}
    counted: set[tuple[object, object]] = set()
    for probe in probes:
        if probe.rank != 0 or (probe.case, probe.plan) in counted:
            continue
        counted.add((probe.case, probe.plan))
        label = probe.case.label
        origin = next((kind for kind in ORIGINS[1:] if label.startswith(kind)), ORIGINS[0])
        seconds[origin] = seconds.get(origin, 0.0) + probe_seconds(problem, probe, device)
    return {origin: round(value, 3) for origin, value in sorted(seconds.items())}


def summary(plans_made: dict) -> dict[str, object]:
    """For each profile, the median share of the required estimate each origin takes, over
    every plan and over the plans past 90 s."""
    shares: dict[str, dict[str, list[float]]] = {}
    for key, plan in plans_made.items():
        split = plan.get("required_s_by_origin")
        total = sum(split.values()) if split else 0.0
        if not total:
            continue
        profile = key.rsplit(" ", 1)[1]
        groups = ["all"] + (["past 90 s"] if plan["estimate_s"] > 90 else [])
        for group in groups:
            by_group = shares.setdefault(f"{profile}, {group}", {})
            for origin in ORIGINS:
                by_group.setdefault(origin, []).append(split.get(origin, 0.0) / total)
    return {
        group: {"plans": len(next(iter(values.values())))}
        | {origin: round(statistics.median(v), 3) for origin, v in values.items()}
        for group, values in shares.items()
    }


def compare(old: dict, new: dict) -> dict[str, object]:
    same, differ = [], {}
    for key in sorted(old.keys() & new.keys()):
        a, b = old[key].get("required"), new[key].get("required")
        if a is None or b is None:
            continue
        if a == b:
            same.append(key)
        else:
            differ[key] = {
                "required before": len(a),
                "required after": len(b),
                "only before": len(set(a) - set(b)),
                "only after": len(set(b) - set(a)),
            }
    taken = {key: new[key]["optional taken"] for key in same if new[key].get("optional taken")}
    return {
        "plans compared": len(same) + len(differ),
        "required probes the same": len(same),
        "required probes different": differ,
        "plans that now take optional probes": len(taken),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, nargs="?", help="the SOL-ExecBench folder")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--profiles", nargs="+", default=["quick", "default"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--compare", type=Path, nargs=2, metavar=("OLD", "NEW"))
    parser.add_argument(
        "--origins", type=Path, metavar="PLANS", help="the median shares of a plans file's origins"
    )
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(path.read_text()) for path in args.compare)
        result: dict[str, object] = compare(old, new)
    elif args.origins:
        result = summary(json.loads(args.origins.read_text()))
    elif args.root is not None:
        result = plans(args.root, args.device, args.profiles)
    else:
        raise SystemExit("name the SOL-ExecBench folder, or --compare OLD NEW")
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text if args.compare or args.origins else f"{len(result)} plans")


if __name__ == "__main__":
    main()
