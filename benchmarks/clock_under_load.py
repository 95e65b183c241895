"""The auditor's clock on a busy host: every example candidate audited with the timing check
alone while other processes keep the cores busy, so that a verdict that moved with the host's
load would show as a clock failure of an honest candidate.

    python benchmarks/clock_under_load.py [--busy N] [--load python|torch] [--bursts S] [--controls]
        [--rounds N] [--device cpu] [--out RECORD.json]

--busy: processes spinning beside the audits (default: one per core), in Python or (--load
torch) in torch's matrix products with its threads. --bursts S: they spin
for S seconds, rest for S, and so on, so that the host's load changes between the timing
probe and the auditor's clock (the way another test or build starting work changes it).
--controls: the hostile corpus's honest controls too (tests/hostile/controls, one of them
starting a thread pool in every call). --rounds: audits of each candidate. The record holds,
per candidate, the worker's figures, the auditor's, the pairs measured and any clock failure;
the summary counts them.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

from clock_agreement import rows

from kernelaudit.engine.audit import audit
from kernelaudit.findings import write_reports
from kernelaudit.problem.load import load_problem

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


CONTROLS = EXAMPLES.parent / "tests" / "hostile"


def _spin(stop: multiprocessing.synchronize.Event, bursts_s: float, load: str) -> None:
    import torch

    square = torch.randn(256, 256)
    while not stop.is_set():
        if bursts_s and int(time.monotonic() / bursts_s) % 2:
            time.sleep(0.01)
        elif load == "torch":
            square @ square  # torch's own threads, as a neighbouring test's
        else:
            sum(i * i for i in range(10_000))


def _candidates(controls: bool) -> list[tuple[Path, str]]:
    """(problem file, candidate spec) of every example candidate, and the corpus's controls
    that run on a CPU."""
    found = []
    for example in sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").is_file()):
        listed = json.loads((example / "expected.json").read_text())["candidates"]
        found += [(example / "problem.py", str(example / e["candidate"])) for e in listed]
    if controls:
        sys.path.insert(0, str(CONTROLS))
        from corpus import CORPUS

        found += [
            (CONTROLS / "problems" / f"{s.problem}.py", f"{CONTROLS / s.file}::candidate")
            for s in CORPUS
            if s.expect is None and "cpu" in s.devices
        ]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--busy", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bursts", type=float, default=0.0, metavar="S")
    parser.add_argument("--load", choices=("python", "torch"), default="python")
    parser.add_argument("--controls", action="store_true")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, help="write every row and the summary here")
    args = parser.parse_args()
    stop = multiprocessing.Event()
    spinners = [
        multiprocessing.Process(target=_spin, args=(stop, args.bursts, args.load))
        for _ in range(args.busy)
    ]
    for spinner in spinners:
        spinner.start()
    found = []
    began = time.perf_counter()
    try:
        for _ in range(args.rounds):
            for problem_file, spec in _candidates(args.controls):
                report = audit(load_problem(problem_file), spec, "quick", args.device, ["timing"])
                path = Path(f"/tmp/clock-under-load-{problem_file.parent.name}.json")
                write_reports([report], path)
                found += rows(path)
                last = found[-1] if found else {}
                print(
                    f"{Path(spec.split('::')[0]).stem:44} {report.verdict} "
                    f"worker {' '.join(f'{w:.3g}' for w in last.get('worker_s', []))} s clock "
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
        "bursts_s": args.bursts,
        "load": args.load,
        "timed_again_slower": sum(bool(r.get("timed_again_slower")) for r in found),
        "cores": os.cpu_count(),
        "failing_on_the_clock": sum(bool(r["clock_failures"]) for r in found),
        "unresolved_on_the_clock": sum(bool(r.get("clock_unresolved")) for r in found),
        "confirmed_pairs": sum(1 for r in found if r["pairs"] and r["pairs"] > 1),
        "seconds": round(time.perf_counter() - began, 1),
    }
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "rows": found}, indent=1))


if __name__ == "__main__":
    main()
