"""What audits already made would have taken had the planner given its optional probes a
different share of the budget: each report's probes planned again at each share (on shapes
alone, no GPU), and the seconds the report records for the probes a share leaves out taken
from its audit's. Required probes (rank 0) never depend on the share, so only optional ones
drop out; a probe that shared another's run recorded little of its own, so the figures are
what the audit would at least have saved, not a measurement.

    python benchmarks/share_replay.py build/solexecbench REPORT.json ... \\
        --shares 0.45 0.35 --results RESULTS.json ... --out share-replay.json

`--constant REQUIRED_MOST` varies the budgets the required probes may take instead
(`engine.budget.REQUIRED_MOST`; `--audited-share inf` for reports made before it existed).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kernelaudit.checks import build_checks
from kernelaudit.checks.base import PlanContext, Probe
from kernelaudit.engine import budget
from kernelaudit.errors import ProblemError
from kernelaudit.formats import read_problem
from kernelaudit.profiles import profile_named

SMS = 132
"""The streaming multiprocessors of an H100 or H200 (SXM), which some checks plan with."""


def _key(check: str, sizes: dict, values: dict, layouts: dict, seed: int, config: int) -> str:
    return json.dumps([check, sizes, values, layouts, seed, config], sort_keys=True)


def _probe_key(probe: Probe) -> str:
    case = probe.case
    return _key(
        probe.check,
        dict(case.sizes),
        dict(case.values),
        dict(case.layouts),
        case.seed,
        case.dtype_config,
    )


def _record_key(record: dict[str, Any]) -> str:
    case = record["case"]
    return _key(
        record["check"],
        case["sizes"],
        case.get("values", {}),
        case.get("layouts", {}),
        case.get("seed", 0),
        case.get("dtype_config", 0),
    )


def _planned(
    root: Path, report: dict[str, Any], shares: list[float], constant: str = "PROBE_SHARE"
) -> Iterator[set[str]]:
    """The keys of the probes planned at each value of the budget's `constant`."""
    folder = Path(report["problem_path"])
    folder = folder.parent if folder.suffix else folder  # .../<level>/<problem>/definition.json
    problem = read_problem(root / folder.parent.name / folder.name)
    profile = profile_named(report["profile"])
    ctx = PlanContext(problem, profile, "cuda", SMS, None)
    probing = [check for check in build_checks() if not hasattr(check, "conclude")]
    planned = [p for check in probing for p in check.plan(ctx)]
    kept = getattr(budget, constant)
    try:
        for share in shares:
            setattr(budget, constant, share)
            fitted = budget.fit(planned, problem, "cuda", profile.budget_s)
            yield {_probe_key(p) for p in fitted.probes}
    finally:
        setattr(budget, constant, kept)


def replay(
    root: Path,
    path: Path,
    shares: list[float],
    walls: dict[str, float],
    audited: float,
    constant: str = "PROBE_SHARE",
) -> dict[str, Any]:
    report = json.loads(path.read_text())["reports"][0]
    plans = list(_planned(root, report, [audited, *shares], constant))
    recorded: dict[str, float] = {}
    found_by: dict[str, set[str]] = {}  # each finding's key: the probes that found it
    for record in report["cases"]:
        key = _record_key(record)
        recorded[key] = recorded.get(key, 0.0) + float(record["seconds"])
        for failure in record.get("failures", ()):
            found_by.setdefault(str(failure), set()).add(key)
    # the command's wall seconds where a results file records them (Python's and torch's
    # start included), else the audit's own
    seconds = walls.get(report["problem"], report["seconds"])
    found = {
        "problem": report["problem"],
        "seconds": seconds,
        "audit_s": report["seconds"],
        "planned_s": report.get("budget", {}).get("planned_s"),
        "probes_recorded": len(recorded),
        "probes_replanned": len(plans[0]),
        "probes_matched": len(plans[0] & set(recorded)),
    }
    for share, plan in zip(shares, plans[1:], strict=True):
        # probes the audit's own plan held that this share's does not (not follow-ups,
        # which no plan holds)
        dropped = (plans[0] - plan) & set(recorded)
        saved = sum(recorded[k] for k in dropped)
        found[f"at {share}"] = {
            "probes_left_out": len(dropped),
            "seconds_saved": round(saved, 2),
            "seconds": round(seconds - saved, 2),
            # what no probe left in would have found
            "findings_lost": sorted(f for f, by in found_by.items() if by <= dropped),
        }
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path, help="the SOL-ExecBench folder")
    parser.add_argument("reports", type=Path, nargs="+", help="JSON reports of audits made")
    parser.add_argument("--shares", type=float, nargs="+", default=[0.45, 0.35])
    parser.add_argument(
        "--audited-share",
        type=float,
        default=0.6,
        help="the value of --constant in the code that made the reports (PROBE_SHARE: 0.6 "
        "before 2026-11-29's change; REQUIRED_MOST: inf before 2026-12-01's)",
    )
    parser.add_argument(
        "--results", type=Path, nargs="*", default=[], help="results files with wall seconds"
    )
    parser.add_argument(
        "--constant",
        default="PROBE_SHARE",
        choices=["PROBE_SHARE", "REQUIRED_MOST"],
        help="the budget's constant the values are of",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    walls = {
        p["problem"].split("/", 1)[1]: float(p["seconds"])
        for path in args.results
        for p in json.loads(path.read_text())["problems"]
        if p.get("status") == "done"
    }
    rows = []
    for path in args.reports:
        try:
            rows.append(
                replay(args.root, path, args.shares, walls, args.audited_share, args.constant)
            )
        except (OSError, KeyError, ValueError, ProblemError) as error:
            print(f"{path}: {type(error).__name__}: {error}", file=sys.stderr)
            continue
        print(json.dumps(rows[-1]), flush=True)
    summary: dict[str, Any] = {
        "audits": len(rows),
        "median_s": statistics.median(r["seconds"] for r in rows) if rows else None,
        "within_30_s": sum(r["seconds"] <= 30 for r in rows),
    }
    for share in args.shares:
        seconds = [r[f"at {share}"]["seconds"] for r in rows]
        summary[f"at {share}"] = {
            "median_s": statistics.median(seconds) if seconds else None,
            "within_30_s": sum(s <= 30 for s in seconds),
        }
    args.out.write_text(json.dumps({"summary": summary, "audits": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
