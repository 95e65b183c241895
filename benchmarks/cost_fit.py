"""The constants of the budget's cost model (`kernelaudit.inputs.cost`), fitted again: the
numerics probes' own seconds (each probe's run and judging, as the report's `cases` list them)
against the elements of their cases' inputs and outputs, over every report in the logs of
`benchmarks/solexecbench_scale.py` runs (as `plan_accuracy.py` reads them) or in the JSON
reports named. The probes are put in half-decade bins of elements (those with 10 or more), and
the line is the least-squares fit of the bins' median seconds in relative error: a few huge
probes do not decide it, nor the thousands of the commonest size.

    python benchmarks/cost_fit.py benchmarks/results --device cuda --profile default \
        [--match coverage] [--report demo.json ...] [--out fit.json]

A probe that took another probe's run (`probes_sharing_a_run`) spent only its judging; the
fit keeps the first numerics probe of each case, leaves out the cases the unwritten check
probes too, and drops the rest. Problems are read from the report's `problem_path`, so the
problems' files must be where the audits read them.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from plan_accuracy import scale_reports

from kernelaudit.errors import UsageError
from kernelaudit.formats.readers import read_problem
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.cost import case_elements, cost_model
from kernelaudit.problem.spec import Problem


def _named(paths: list[Path]) -> Iterator[tuple[str, dict]]:
    for path in paths:
        for report in json.loads(path.read_text()).get("reports", []):
            yield str(path), report


def _probes(reports: Iterator[tuple[str, dict]], device: str, profile: str) -> list[dict]:
    """(problem, elements, seconds) of each numerics probe that made its own run: the first of
    each case, and none of the cases the unwritten check also probes (its screens, the plain
    calls of the boundary cases, run first, so the sweep's probes of them hold only judging)."""
    problems: dict[str, Problem | None] = {}
    rows = []
    for _, report in reports:
        if not str(report.get("device", "")).startswith(device):
            continue
        if report.get("profile") != profile:
            continue
        path = str(report.get("problem_path", ""))
        if path not in problems:
            try:
                problems[path] = read_problem(path)
            except (UsageError, OSError):
                problems[path] = None
        problem = problems[path]
        if problem is None:
            continue
        records = report.get("cases", [])
        seen = {Case.from_json(r["case"]) for r in records if r.get("check") == "unwritten"}
        for record in records:
            if record.get("check") != "numerics":
                continue
            case = Case.from_json(record["case"])
            if case in seen:
                continue
            seen.add(case)
            rows.append(
                {
                    "problem": report.get("problem"),
                    "elements": case_elements(problem, case.size_map()),
                    "seconds": float(record["seconds"]),
                }
            )
    return rows


def fit(rows: list[dict], device: str) -> dict[str, object]:
    elements = np.array([row["elements"] for row in rows], dtype=np.float64)
    seconds = np.array([row["seconds"] for row in rows], dtype=np.float64)
    edges = 10.0 ** np.arange(0.0, 12.5, 0.5)
    bins = []
    for low, high in itertools.pairwise(edges):
        inside = (elements >= low) & (elements < high)
        if inside.sum() >= _BIN_PROBES:
            bins.append(
                (
                    float(np.median(elements[inside])),
                    float(np.median(seconds[inside])),
                    int(inside.sum()),
                )
            )
    if len(bins) < 2:
        raise SystemExit("too few sizes to fit a line through: audit more problems")
    at = np.array([b[0] for b in bins])
    took = np.array([b[1] for b in bins])
    design = np.stack([np.ones_like(at), at], axis=1) / took[:, None]
    (per_call, per_element), *_ = np.linalg.lstsq(design, np.ones_like(took), rcond=None)
    model = cost_model(device)
    estimates = model.per_call_s + elements * model.per_element_s
    return {
        "probes": len(rows),
        "problems": len({row["problem"] for row in rows}),
        "per_call_s": round(float(per_call), 4),
        "per_element_ns": round(float(per_element) * 1e9, 2),
        "current_per_call_s": model.per_call_s,
        "current_per_element_ns": round(model.per_element_s * 1e9, 2),
        "probe seconds / current estimate, quartiles": [
            round(float(q), 3) for q in np.percentile(seconds / estimates, [25, 50, 75])
        ],
        "bins (median elements, median seconds, probes)": [
            (int(e), round(s, 4), n) for e, s, n in bins
        ],
    }


_BIN_PROBES = 10


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, nargs="?", help="folder of results and their logs")
    parser.add_argument("--device", default="cuda", help="cuda (any GPU), cuda:1, or cpu")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--match", default="", help="only logs whose file name holds this")
    parser.add_argument("--report", type=Path, action="append", default=[], help="a JSON report")
    parser.add_argument("--out", type=Path, help="also write the fit and its probes here")
    args = parser.parse_args()
    logged = scale_reports(args.folder, args.match) if args.folder is not None else iter(())
    sources = itertools.chain(logged, _named(args.report))
    rows = _probes(sources, args.device, args.profile)
    if not rows:
        raise SystemExit("no numerics probes of that device and profile in those reports")
    result = fit(rows, args.device)
    if args.out:
        args.out.write_text(json.dumps({**result, "rows": rows}, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
