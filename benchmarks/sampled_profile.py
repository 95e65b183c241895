"""Where an audit's threads spend their time, from py-spy's raw samples (`py-spy record --idle
--threads --subprocesses --format raw`): per process and thread, the samples; for the main
thread of the auditor and of the worker, the share of samples in each kernelaudit function
(inclusive) and in each innermost frame.

    python benchmarks/sampled_profile.py samples.txt [--top 30]

Sampling slows the processes it reads (an audit of 18 s took 50 s at 200 samples a second), so
the shares say where the time goes, not how long it takes.
"""

from __future__ import annotations

import argparse
import gzip
import re
from collections import Counter
from pathlib import Path

_LINE = re.compile(r":\d+\)")


def read(path: Path) -> list[tuple[list[str], int]]:
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as lines:
        for line in lines:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            rows.append((stack.split(";"), int(count)))
    return rows


def _last(stack: list[str], prefix: str) -> str:
    found = [frame for frame in stack if frame.startswith(prefix)]
    return found[-1] if found else ""


def summary(rows: list[tuple[list[str], int]], top: int) -> str:
    out = []
    threads = Counter()
    for stack, count in rows:
        threads[(_last(stack, "process ")[:90], _last(stack, "thread "))] += count
    out.append("samples by process and thread:")
    out += [f"  {n:7d}  {p}  {t}" for (p, t), n in threads.most_common(top)]
    for name, marker in (
        ("auditor", "kernelaudit.cli"),
        ("worker", "kernelaudit.runner.worker.main"),
    ):
        main = [
            (stack, count)
            for stack, count in rows
            if marker in _last(stack, "process ") and _last(stack, "thread ").endswith("MainThread")
        ]
        total = sum(count for _, count in main)
        if not total:
            continue
        inclusive, innermost = Counter(), Counter()
        for stack, count in main:
            ours = [_LINE.sub(")", frame) for frame in stack if "kernelaudit/" in frame]
            for frame in set(ours):
                inclusive[frame] += count
            innermost[_LINE.sub(")", stack[-1])] += count
        out.append(f"\n{name}'s main thread, {total} samples; kernelaudit functions (inclusive):")
        out += [f"  {n / total:6.1%}  {f}" for f, n in inclusive.most_common(top)]
        out.append("innermost frames:")
        out += [f"  {n / total:6.1%}  {f}" for f, n in innermost.most_common(top)]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", type=Path)
    parser.add_argument("--top", type=int, default=30)
    args = parser.parse_args()
    print(summary(read(args.samples), args.top))


if __name__ == "__main__":
    main()
