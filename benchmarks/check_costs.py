"""What each memory-safety, race and invariance check costs, against a plain candidate run,
and what the default profile's whole audit takes, per bundled example.

    python benchmarks/check_costs.py --out costs.json

For every example problem, its first candidate the examples expect to pass is audited:
- plain: the `quick` profile with the numerics check alone, what a benchmark's verifier does
  (start a process, import the candidate, call it on the workloads and compare);
- each check alone in the `--profile` profile (default: `default`): its whole cost (its own
  worker, its cases' truth, its calls or its child process), and that as a multiple of plain;
- every check together in that profile: the whole audit a user waits for.
Triton compiles on first use: `--warm` audits everything once first and keeps the second round.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import audit, environment, resolve_device

CHECKS = ("triton-bounds", "sanitizer", "races", "autotune", "batch-invariance", "memory")


def timed(problem: str, candidate: str, device: str, profile: str, checks: list[str] | None):
    began = time.perf_counter()
    report = audit(problem, candidate, profile=profile, device=device, checks=checks)
    return time.perf_counter() - began, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--only", nargs="+", default=None, help="example problems by name")
    parser.add_argument("--checks", nargs="+", default=list(CHECKS))
    parser.add_argument("--warm", action="store_true", help="audit everything once first")
    parser.add_argument("--out", type=Path, default=Path("check-costs.json"))
    args = parser.parse_args()
    device = resolve_device(args.device)
    rows = []
    for example in load_examples(find_examples(None)):
        name = Path(example.problem).parent.name
        if example.verdict != "PASS" or (args.only and name not in args.only):
            continue
        if any(row["problem"] == name for row in rows):
            continue  # one passing candidate per problem
        runs: list[tuple[str, str, list[str] | None]] = [
            ("plain", "quick", ["numerics"]),
            *((check, args.profile, [check]) for check in args.checks),
            ("all checks", args.profile, None),
        ]
        for _ in range(2 if args.warm else 1):
            seconds: dict[str, float] = {}
            verdicts: dict[str, str] = {}
            notes: dict[str, list[str]] = {}
            for label, profile, checks in runs:
                took, report = timed(example.problem, example.candidate, device, profile, checks)
                seconds[label] = round(took, 2)
                verdicts[label] = report.verdict
                # the cost note of the sanitizer says what ran and what was skipped
                notes[label] = [f.title for f in report.findings if f.key == "cost"]
        plain = max(seconds["plain"], 1e-3)
        row = {
            "problem": name,
            "candidate": example.candidate,
            "seconds": seconds,
            "verdicts": verdicts,
            "cost notes": {label: titles for label, titles in notes.items() if titles},
            "x plain": {label: round(seconds[label] / plain, 2) for label in seconds},
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "profile": args.profile,
        "environment": dict(environment(device)),
        "rows": rows,
    }
    args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
