"""The auditor's clock on a busy host: every example candidate audited with the timing check
alone while other processes keep the cores busy, so that a verdict that moved with the host's
load would show as a clock failure of an honest candidate.

    python benchmarks/clock_under_load.py [--busy N] [--device cpu] [--out RECORD.json]

--busy: processes spinning beside the audits (default: one per core). The record holds, per
candidate, the worker's figure, the auditor's, the pairs measured and any clock failure; the
summary counts them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import time
from pathlib import Path

from clock_agreement import rows

from kernelaudit.engine.audit import audit
from kernelaudit.findings import write_reports
from kernelaudit.problem.load import load_problem

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _spin(stop: multiprocessing.synchronize.Event) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write every row and the summary here")
    args = parser.parse_args()
    stop = multiprocessing.Event()
    spinners = [multiprocessing.Process(target=_spin, args=(stop,)) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    found = []
    began = time.perf_counter()
    try:
        for example in sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").is_file()):
            problem = load_problem(example / "problem.py")
            listed = json.loads((example / "expected.json").read_text())["candidates"]
            for entry in listed:
                spec = f"{example / entry['candidate']}"
                report = audit(problem, spec, "quick", args.device, ["timing"])
                path = Path(f"/tmp/clock-under-load-{example.name}.json")
                write_reports([report], path)
                found += rows(path)
                last = found[-1] if found else {}
                print(
                    f"{example.name:24} {entry['candidate']:44} {report.verdict} "
                    f"worker {last.get('reported_s') or 0:.4g} s clock "
                    f"{last.get('clocked_s') or 0:.4g} s pairs {last.get('pairs')} "
                    f"{' '.join(last.get('clock_failures', []))}",
                    flush=True,
                )
    finally:
        stop.set()
        for spinner in spinners:
            spinner.join()
    summary = {
        "audits": len(found),
        "busy_processes": args.busy,
        "cores": os.cpu_count(),
        "failing_on_the_clock": sum(bool(r["clock_failures"]) for r in found),
        "confirmed_pairs": sum(1 for r in found if r["pairs"] and r["pairs"] > 1),
        "seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "rows": found}, indent=1))


if __name__ == "__main__":
    main()
