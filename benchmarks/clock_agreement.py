"""The auditor's clock against the worker's figure, over audits' JSON reports.

For every report of an audit that ran the timing check, one row: the worker's median per call
(timed in the candidate's process), the auditor's own figure (`engine.clocked`: calls back to
back, timed around the worker's invocations), the copies taken off, the repetitions, the pairs
measured, and whether the timing check failed on either clock. Honest candidates (the examples,
SOL-ExecBench references) must agree; the ratio column shows by how much.

    python benchmarks/clock_agreement.py REPORT.json [REPORT.json ...] [--out RECORD.json]

A folder among the arguments stands for every `*.json` report under it.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

CLOCK_KEYS = (
    "clock-disagrees",
    "clock-repeats-differ",
    "clock-beats-floor",
    "clock-tampered",
    "clock-failed",
)
"""The clock's failing keys (a warning that the host was too busy, `clock-unresolved`, is
counted apart)."""


def rows(path: Path) -> list[dict[str, Any]]:
    """One row per audited candidate of the report at `path` whose timing check ran."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return []
    out = []
    for report in found.get("reports", []) if isinstance(found, dict) else []:
        timing = [f for f in report.get("findings", []) if f.get("check") == "timing"]
        times = next((f for f in timing if f.get("key") == "times"), None)
        if times is None:
            continue
        evidence = times.get("evidence", {})
        clocked = evidence.get("auditor's clock") or {}
        reported = (evidence.get("candidate") or {}).get("median_s")
        per_call = clocked.get("per_call_s")
        out.append(
            {
                "report": str(path),
                "problem": report.get("problem"),
                "candidate": report.get("candidate"),
                "device": report.get("device"),
                "verdict": report.get("verdict"),
                "reported_s": reported,
                "clocked_s": per_call,
                "ratio": per_call / reported if per_call is not None and reported else None,
                "copy_s": clocked.get("copy_s"),
                "repeats": clocked.get("repeats"),
                "pairs": len(clocked.get("samples_s", [])),
                "worker_s": clocked.get("worker_s", []),
                "timed_again_slower": any(
                    f.get("key") == "clock-timed-again-slower" for f in timing
                ),
                "results_read": clocked.get("results_read"),
                "clock_seconds": clocked.get("seconds"),
                "clock_error": clocked.get("error", ""),
                "clock_unresolved": any(f.get("key") == "clock-unresolved" for f in timing),
                "clock_failures": sorted(
                    f["key"]
                    for f in timing
                    if f.get("key") in CLOCK_KEYS and f.get("severity") == "fail"
                ),
            }
        )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, help="write every row and the summary here")
    args = parser.parse_args()
    paths: list[Path] = []
    for given in args.reports:
        paths += sorted(given.rglob("*.json")) if given.is_dir() else [given]
    found = [row for path in paths for row in rows(path)]
    for row in found:
        ratio = f"{row['ratio']:.2f}" if row["ratio"] is not None else "-"
        clocked = f"{row['clocked_s'] * 1e6:,.1f}" if row["clocked_s"] is not None else "-"
        reported = f"{row['reported_s'] * 1e6:,.1f}" if row["reported_s"] is not None else "-"
        print(
            f"{row['problem']:<40.40} {row['candidate'] or '':<32.32} worker {reported:>10} us  "
            f"clock {clocked:>10} us  x{ratio:<6} repeats {row['repeats']} pairs {row['pairs']} "
            f"read {row['results_read']} in {row['clock_seconds'] or 0:.2f} s "
            f"{' '.join(row['clock_failures'])} "
            f"{row['clock_error'][:60]}"
        )
    ratios = [r["ratio"] for r in found if r["ratio"] is not None]
    summary = {
        "audits": len(found),
        "clocked": len(ratios),
        "failing_on_the_clock": sum(bool(r["clock_failures"]) for r in found),
        "ratio_median": statistics.median(ratios) if ratios else None,
        "ratio_max": max(ratios) if ratios else None,
        "results_read": sum(bool(r["results_read"]) for r in found),
        "clock_seconds_median": statistics.median(
            [r["clock_seconds"] for r in found if r["clock_seconds"] is not None] or [0.0]
        ),
    }
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(json.dumps({"summary": summary, "rows": found}, indent=1))


if __name__ == "__main__":
    main()
