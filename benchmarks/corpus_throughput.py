"""Throughput of `kernelaudit corpus`: candidates per hour on 1, 2, 4, ... slots.

    python benchmarks/corpus_throughput.py --profile quick --out corpus-throughput.json

Builds a corpus of copies of the bundled examples (each examples/<name>/ folder: problem.py, its
candidates and expected.json; --problems picks some of them) in a temporary folder and audits it
with `kernelaudit corpus` on 1, 2, 4, ... slots up to one per local GPU (without a GPU: up to
--max-slots CPU slots), each configuration into an empty database. Every configuration gets
`--copies-per-slot` copies per slot, so each slot has the same work and perfect scaling keeps the
wall time constant. A warm-up run (one copy, every slot, not timed; --no-warm-up skips it) fills
Triton's on-disk cache first. The wall time is the whole command: starting the slots, every
audit, storing each result and writing its reports. Prints a table and one JSON line per
configuration, with each job's seconds; --out writes them all with the versions after each
configuration, and the corpus logs beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console

from kernelaudit.corpus.command import add_parser
from kernelaudit.corpus.store import Store
from kernelaudit.corpus.summary import outcome
from kernelaudit.demo import find_examples, load_examples
from kernelaudit.engine.audit import environment


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--checks", default=None, help="comma-separated; default: all")
    parser.add_argument("--copies-per-slot", type=int, default=1)
    parser.add_argument(
        "--slots", type=int, nargs="+", help="configurations (default: 1, 2, 4, ...)"
    )
    parser.add_argument("--max-slots", type=int, default=2, help="CPU slots at most, without GPUs")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu"))
    parser.add_argument("--examples", type=Path, default=None)
    parser.add_argument(
        "--problems", nargs="+", help="example folders to use, by name (default: every one)"
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="skip the untimed warm-up (Triton's cache already holds every kernel)",
    )
    args = parser.parse_args()

    gpus = torch.cuda.device_count() if args.device == "auto" and torch.cuda.is_available() else 0
    most = gpus or args.max_slots
    configurations = args.slots or _doubling(most)
    examples = load_examples(find_examples(args.examples))
    if args.problems:
        known = {Path(e.problem).parent.name for e in examples}
        unknown = sorted(set(args.problems) - known)
        if unknown:
            parser.error(f"--problems: no example named {', '.join(unknown)}; have {sorted(known)}")
        examples = [e for e in examples if Path(e.problem).parent.name in args.problems]
    expected = {(Path(e.problem).parent.name, e.candidate.rpartition("::")[2]): e for e in examples}
    device = "cuda" if gpus else "cpu"
    print(
        f"{len(examples)} example candidates a copy; {gpus} GPU(s); slots {configurations}; "
        f"profile {args.profile}; checks {args.checks or 'all'}",
        flush=True,
    )

    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelaudit-corpus-") as scratch:
        root = Path(scratch)
        copies = args.copies_per_slot * max(configurations)
        names = sorted({Path(e.problem).parent.name for e in examples})
        folders = _copies(find_examples(args.examples), names, root / "copies", copies)
        if not args.no_warm_up:
            _run(root, "warm-up", folders[:1], examples, max(configurations), device, args)
        for slots in configurations:
            used = folders[: args.copies_per_slot * slots]
            seconds, results = _run(root, f"slots-{slots}", used, examples, slots, device, args)
            jobs = len(results)
            counts = {name: sum(outcome(r) == name for r in results) for name in ("PASS", "FAIL")}
            unexpected = sum(
                outcome(r)
                != expected[(Path(r.problem).parent.name, _function(r.candidate))].verdict
                for r in results
            )
            row = {
                "slots": slots,
                "device": device,
                "profile": args.profile,
                "checks": args.checks or "all",
                "jobs": jobs,
                "seconds": round(seconds, 1),
                "candidates_per_hour": round(jobs / seconds * 3600, 1),
                "candidates_per_hour_per_slot": round(jobs / seconds * 3600 / slots, 1),
                "pass": counts["PASS"],
                "fail": counts["FAIL"],
                "error": jobs - counts["PASS"] - counts["FAIL"],
                "unexpected_verdicts": unexpected,
                "devices": sorted({str(r.device) for r in results}),
                "job_seconds": _by_candidate(results),
                "errors": [str(r.error).splitlines()[0][:300] for r in results if r.error],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.out:  # after each configuration, so a run cut short keeps what it measured
                _write(args.out, device, gpus, args.copies_per_slot, rows)

    per = "GPU" if gpus else "slot"
    print(f"\n| slots | jobs | seconds | candidates/hour | per {per} | errors | unexpected |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['slots']} | {row['jobs']} | {row['seconds']} | {row['candidates_per_hour']} "
            f"| {row['candidates_per_hour_per_slot']} | {row['error']} | "
            f"{row['unexpected_verdicts']} |"
        )


def _write(out: Path, device: str, gpus: int, copies_per_slot: int, rows: list[dict]) -> None:
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "environment": dict(environment(device)),
        "gpus": gpus,
        "copies_per_slot": copies_per_slot,
        "configurations": rows,
    }
    out.write_text(json.dumps(record, indent=1))


def _doubling(most: int) -> list[int]:
    counts = [1]
    while counts[-1] * 2 < most:
        counts.append(counts[-1] * 2)
    return sorted({*counts, most})


def _copies(examples: Path, names: list[str], root: Path, copies: int) -> list[Path]:
    """`copies` folders, each holding the example folders `names`: the same files at new
    paths, so each copy's jobs have keys of their own."""
    folders = []
    for index in range(copies):
        folder = root / f"copy{index}"
        for name in names:
            shutil.copytree(
                examples / name,
                folder / name,
                ignore=shutil.ignore_patterns("__pycache__"),
            )
        folders.append(folder)
    return folders


def _run(
    root: Path,
    name: str,
    folders: list[Path],
    examples: list[Any],
    slots: int,
    device: str,
    args: argparse.Namespace,
) -> tuple[float, list[Any]]:
    """Audit the examples of `folders` on `slots` slots into a new database; the wall time
    and the stored results."""
    manifest = root / f"{name}.jsonl"
    with manifest.open("w") as out:
        for folder in folders:
            for example in examples:
                copy = folder / Path(example.problem).parent.name
                file, _, function = example.candidate.rpartition("::")
                entry = {
                    "problem": str(copy / "problem.py"),
                    "candidate": f"{copy / Path(file).name}::{function}",
                }
                out.write(json.dumps(entry) + "\n")
    db = root / f"{name}.sqlite"
    argv = ["corpus", str(manifest), "--db", str(db), "--profile", args.profile]
    argv += ["--workers", str(slots), "--device", device]
    argv += ["--checks", args.checks] if args.checks else []
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    parsed = parser.parse_args(argv)
    logs = args.out.parent if args.out else root  # kept beside --out, for the run's details
    with (logs / f"corpus-{name}.log").open("w") as log:
        began = time.perf_counter()
        parsed.run(parsed, Console(file=log, width=160))
        seconds = time.perf_counter() - began
    with Store(db) as store:
        return seconds, store.results()


def _by_candidate(results: list[Any]) -> dict[str, list[float]]:
    """Each candidate's job seconds, one per copy."""
    seconds: dict[str, list[float]] = {}
    for r in results:
        name = f"{Path(r.problem).parent.name}::{_function(r.candidate)}"
        seconds.setdefault(name, []).append(round(r.seconds or 0.0, 1))
    return seconds


def _function(spec: str) -> str:
    return spec.rpartition("::")[2]


if __name__ == "__main__":
    main()
