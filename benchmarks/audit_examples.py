"""Time the audit of every bundled example, per profile, on this machine.

    python benchmarks/audit_examples.py --profiles quick default --out results.json

Each row is one candidate's whole audit (worker start, planning, every probe, the fp64 truth,
judging and shrinking), timed with a host wall clock around `run_audit`. The target on an H100 is
60 s per example problem for `default` and 10 s for `quick`; a problem's time is the sum over
its candidates. Writes a JSON record with versions and the device, and prints a table.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from kernelaudit.checks import build_checks
from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import environment, resolve_device, run_audit
from kernelaudit.problem.load import load_problem
from kernelaudit.profiles import profile_named
from kernelaudit.runner.candidate import parse_candidate

TARGET_S = {"quick": 10.0, "default": 60.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profiles", nargs="+", default=["quick", "default"])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("benchmark-audit-examples.json"))
    args = parser.parse_args()

    device = resolve_device(args.device)
    examples = load_examples(find_examples(args.examples))
    rows = []
    for profile_name in args.profiles:
        profile = profile_named(profile_name)
        for example in examples:
            problem = load_problem(example.problem)
            candidate = parse_candidate(example.candidate)
            started = time.perf_counter()
            report = run_audit(problem, candidate, profile, device, build_checks())
            seconds = time.perf_counter() - started
            rows.append(
                {
                    "profile": profile_name,
                    "problem": problem.name,
                    "candidate": candidate.function,
                    "verdict": report.verdict,
                    "expected": example.verdict,
                    "cases": len(report.records),
                    "seconds": round(seconds, 2),
                    "phases": dict(report.phases),
                }
            )
            phases = " ".join(f"{k.split()[0]}={v:.1f}" for k, v in report.phases)
            print(
                f"{profile_name:8} {problem.name:20} {candidate.function:30} "
                f"{report.verdict:4} {len(report.records):4} cases {seconds:7.1f} s  {phases}",
                flush=True,
            )

    per_problem: dict[tuple[str, str], float] = defaultdict(float)
    for row in rows:
        per_problem[(row["profile"], row["problem"])] += row["seconds"]
    print("\nper problem (all candidates):")
    for (profile_name, problem_name), seconds in per_problem.items():
        target = TARGET_S.get(profile_name)
        mark = (
            ""
            if target is None
            else ("  within target" if seconds <= target else f"  OVER the {target:.0f} s target")
        )
        print(f"  {profile_name:8} {problem_name:20} {seconds:7.1f} s{mark}")
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "environment": dict(environment(device)),
        "rows": rows,
        "per_problem_seconds": {f"{p}/{n}": round(s, 2) for (p, n), s in per_problem.items()},
    }
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
