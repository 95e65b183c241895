"""Time the audit of every bundled example, per profile, on this machine.

    python benchmarks/audit_examples.py --profiles quick default --out results.json

Each row is one candidate's whole audit (planning, every probe, the fp64 truth, judging and
shrinking), timed with a host wall clock from the end of the previous audit, as the command
line runs them: the next candidate's worker starts up while the current one is audited. A
problem's time is the sum over its candidates. The targets on an H100: 60 s per example problem
for `default`, 10 s for `quick`. Triton compiles a kernel for every new block size and
specialisation it meets; `--rounds 2` runs everything twice, so the second round shows the
time with Triton's on-disk cache warm. `--checks` audits with a subset of the checks (to
measure what the others add); every row also gives the seconds spent in each check's own
probes. Writes a JSON record with versions and the device.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from pathlib import Path

from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import audit_in_turn, environment, resolve_device
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
    parser.add_argument("--rounds", type=int, default=1, help="run every profile this often")
    parser.add_argument("--checks", nargs="+", default=None, help="only these checks")
    args = parser.parse_args()

    device = resolve_device(args.device)
    examples = load_examples(find_examples(args.examples))
    rows = []
    for round_number, profile_name in (
        (r, p) for r in range(1, args.rounds + 1) for p in args.profiles
    ):
        profile = profile_named(profile_name)
        jobs = [(load_problem(e.problem), parse_candidate(e.candidate)) for e in examples]
        began = time.perf_counter()
        reports = audit_in_turn(jobs, profile, device, args.checks)
        for example, report in zip(examples, reports, strict=True):
            # wall time since the previous report: what a user waits for this candidate, with
            # its worker's start-up overlapped with the previous audit as the CLI does
            seconds = time.perf_counter() - began
            began = time.perf_counter()
            by_check: dict[str, float] = defaultdict(float)
            for record in report.records:
                by_check[record.check] += record.seconds
            rows.append(
                {
                    "profile": profile_name,
                    "round": round_number,
                    "problem": report.problem,
                    "candidate": report.candidate_function,
                    "verdict": report.verdict,
                    "expected": example.verdict,
                    "cases": len(report.records),
                    "seconds": round(seconds, 2),
                    "phases": dict(report.phases),
                    "probe seconds by check": {k: round(v, 2) for k, v in by_check.items()},
                }
            )
            phases = " ".join(f"{k.split()[0]}={v:.1f}" for k, v in report.phases)
            print(
                f"{profile_name:8} r{round_number} {report.problem:20} "
                f"{report.candidate_function:30} "
                f"{report.verdict:4} {len(report.records):4} cases {seconds:7.1f} s  {phases}",
                flush=True,
            )

    per_problem: dict[tuple[str, int, str], float] = defaultdict(float)
    for row in rows:
        per_problem[(row["profile"], row["round"], row["problem"])] += row["seconds"]
    print("\nper problem (all candidates):")
    for (profile_name, round_number, problem_name), seconds in per_problem.items():
        target = TARGET_S.get(profile_name)
        within = target is None or seconds <= target
        mark = "" if target is None else ("  within target" if within else "  OVER target")
        print(f"  {profile_name:8} r{round_number} {problem_name:20} {seconds:7.1f} s{mark}")
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "checks": args.checks or "all",
        "environment": dict(environment(device)),
        "rows": rows,
        "per_problem_seconds": {
            f"{p}/round {r}/{n}": round(s, 2) for (p, r, n), s in per_problem.items()
        },
    }
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
