"""The SOL-ExecBench problems that no results file of `benchmarks/solexecbench_scale.py` in a
folder records as audited (or cut by a limit) in a profile: what a coverage run still owes.
With --summary, what the files record instead: how many problems are settled, owed or not
runnable here, and the median and 90th percentile of each settled problem's latest audit (a
problem cut by a limit counts as its limit, so both are lower bounds then; the records come from
different code and machines). With --code, only the files of the runs that name that code
(`solexecbench_scale.py --code`): audited in a shuffled order, the problems they settled are a
uniform sample of the runnable ones, and the summary adds 95% intervals for the median and the
90th percentile over all of them, from the sample's order statistics alone (binomial: a little
wider than the sample, drawn without replacement, needs).

    python benchmarks/unaudited.py benchmarks/results build/solexecbench --profile default
    python benchmarks/unaudited.py benchmarks/results build/solexecbench --summary
    python benchmarks/unaudited.py benchmarks/results build/solexecbench --summary --code d5e0250
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Iterator
from pathlib import Path


def _records(results: Path, code: str | None = None) -> Iterator[tuple[str, dict]]:
    """Every problem record of every results file in `results` (those of runs naming `code`,
    when given), with its run's start."""
    for path in results.glob("solexecbench-scale-*.json"):
        record = json.loads(path.read_text())
        record = record.get("solexecbench-scale", record)
        if not isinstance(record, dict):
            continue
        if code is not None and record.get("code") != code:
            continue
        when = f"{record.get('date', '')} {record.get('started', '')}"
        for problem in record.get("problems", []):
            yield when, problem


def latest(results: Path, profile: str, code: str | None = None) -> dict[str, dict]:
    """Each problem's latest record in `profile`, done or cut by a limit, by the run's start:
    the problems a coverage run owes nothing."""
    kept: dict[str, tuple[str, dict]] = {}
    for when, problem in _records(results, code):
        if problem.get("profile") != profile or problem.get("status") not in ("done", "timeout"):
            continue
        name = problem["problem"]
        if name not in kept or when >= kept[name][0]:
            kept[name] = (when, problem)
    return {name: problem for name, (_, problem) in kept.items()}


def _problems(root: Path) -> list[str]:
    return [
        f"{d.parent.parent.name}/{d.parent.name}" for d in sorted(root.glob("*/*/definition.json"))
    ]


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _below(n: int, share: float, k: int) -> float:
    """P(B <= k) for B binomial with `n` draws of probability `share`."""
    return sum(math.comb(n, i) * share**i * (1 - share) ** (n - i) for i in range(k + 1))


def interval(values: list[float], share: float, level: float = 0.95) -> list[float | None]:
    """A `level` interval for the `share` quantile of the population `values` were sampled
    from uniformly: two of their order statistics, chosen by the binomial law of how many
    sampled values fall below the quantile; None for a side the sample cannot bound."""
    ordered, n, tail = sorted(values), len(values), (1 - level) / 2
    # the j-th smallest (1-based) is below the quantile unless fewer than j values are
    low = max((j for j in range(1, n + 1) if _below(n, share, j - 1) <= tail), default=None)
    high = min((k for k in range(1, n + 1) if _below(n, share, k - 1) >= 1 - tail), default=None)
    return [
        ordered[low - 1] if low is not None else None,
        ordered[high - 1] if high is not None else None,
    ]


def summary(results: Path, root: Path, profile: str, code: str | None = None) -> dict[str, object]:
    records = latest(results, profile, code)
    problems = _problems(root)
    unrunnable = {p["problem"] for _, p in _records(results) if p.get("status") == "not-runnable"}
    seconds = [
        max(float(r["seconds"]), float(r.get("limit_s") or 0.0))
        if r["status"] == "timeout"
        else float(r["seconds"])
        for r in records.values()
    ]
    found: dict[str, object] = {
        "problems": len(problems),
        "settled": len(records),
        "cut by a limit": sum(r["status"] == "timeout" for r in records.values()),
        "not runnable here": len(unrunnable - set(records)),
        "owed": len(set(problems) - set(records) - unrunnable),
        "median_s": round(_percentile(seconds, 0.5), 2) if seconds else None,
        "p90_s": round(_percentile(seconds, 0.9), 2) if seconds else None,
        "within_30_s": sum(s <= 30.0 for s in seconds),
        "within_90_s": sum(s <= 90.0 for s in seconds),
    }
    if code is not None:
        # an audit of the sample that ended without a report (killed, say) is in the sample
        # too, longer than any target: left out, the sample would no longer be uniform
        ended = {
            r["problem"]
            for _, r in _records(results, code)
            if r.get("profile") == profile
            and r.get("status") == "error"
            and r.get("exit_code") is not None
            and r["problem"] not in records
        }
        sample = seconds + [math.inf] * len(ended)
        found["code"] = code
        found["ended without a report"] = sorted(ended)
        found["sample"] = len(sample)
        found["sample_within_30_s"] = sum(s <= 30.0 for s in sample)
        found["sample_within_90_s"] = sum(s <= 90.0 for s in sample)
        found["sample_median_s"] = _finite(_percentile(sample, 0.5)) if sample else None
        found["median_s_95"] = [_finite(s) for s in interval(sample, 0.5)]
        found["p90_s_95"] = [_finite(s) for s in interval(sample, 0.9)]
    return found


def _finite(seconds: float | None) -> float | None:
    """Seconds as JSON holds them: None for no bound (an audit that never ended)."""
    return None if seconds is None or math.isinf(seconds) else round(seconds, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("root", type=Path, help="folder holding <level>/<problem>/definition.json")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--summary", action="store_true", help="what the files record instead")
    parser.add_argument("--code", help="only the runs that name this code (--code of the runs)")
    args = parser.parse_args()
    if args.summary:
        print(json.dumps(summary(args.results, args.root, args.profile, args.code), indent=1))
        return
    seen = latest(args.results, args.profile, args.code)
    owed = "".join(f"{problem}\n" for problem in _problems(args.root) if problem not in seen)
    try:
        sys.stdout.write(owed)
        sys.stdout.flush()
    except BrokenPipeError:  # a reader that stopped early (`| head`) wanted no more
        # what is left in the buffer goes nowhere, rather than failing again at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":
    main()
