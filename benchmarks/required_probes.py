"""What every audit of each SOL-ExecBench problem runs whatever its budget (the probes of rank
0), and what the budget adds, as the planner of the code on PYTHONPATH plans them: to check
that a change to the cost model or the planner's shares leaves the required probes as they
were, run it with the old code and the new, then compare.

    PYTHONPATH=old/src python benchmarks/required_probes.py build/solexecbench --out old.json
    PYTHONPATH=src python benchmarks/required_probes.py build/solexecbench --out new.json
    python benchmarks/required_probes.py --compare old.json new.json

Plans are made for a GPU (`--device cuda`, 132 SMs as an H200 has), the candidate being the
problem's reference; nothing runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kernelaudit.checks.base import PlanContext
from kernelaudit.engine.budget import fit_ahead
from kernelaudit.errors import UsageError
from kernelaudit.formats.readers import read_problem
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
            required = sorted(
                json.dumps([p.check, p.case.to_json(), p.plan.to_json()], sort_keys=True)
                for p in fitted.probes
                if p.rank == 0
            )
            result[f"{name} {profile}"] = {
                "required": required,
                "optional taken": len(fitted.probes) - len(required),
                "estimate_s": round(fitted.estimate_s, 3),
            }
    return result


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
    args = parser.parse_args()
    if args.compare:
        old, new = (json.loads(path.read_text()) for path in args.compare)
        result: dict[str, object] = compare(old, new)
    elif args.root is not None:
        result = plans(args.root, args.device, args.profiles)
    else:
        raise SystemExit("name the SOL-ExecBench folder, or --compare OLD NEW")
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text if args.compare else f"{len(result)} plans")


if __name__ == "__main__":
    main()
