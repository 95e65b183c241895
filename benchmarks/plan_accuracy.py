"""How close the budget's estimates come to what audits took: for every JSON report in the logs
of `benchmarks/solexecbench_scale.py` runs (the `solexecbench-scale-*-logs.tar.gz` files in a
folder, or folders of reports), the seconds of its probing phases (truth and baseline, candidate
runs, judging, shrinking) against the seconds the planner estimated for the probes it ran
(`budget.planned_s`, from `kernelaudit.inputs.cost`), and the seconds the audit spent outside
those phases.

    python benchmarks/plan_accuracy.py benchmarks/results --device cuda --profile default \
        [--match coverage] [--out accuracy.json]

Only reports of the profile named, audited on the device named (`cuda` matches every GPU), from
logs whose file name holds `--match`, are counted.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
from collections.abc import Iterator
from pathlib import Path

PROBING = ("truth and baseline", "candidate runs", "judging", "shrinking")


def scale_reports(folder: Path, match: str) -> Iterator[tuple[str, dict]]:
    """(where it came from, report) for every report in the folder's logs and report folders
    whose name holds `match`."""
    for archive in sorted(folder.glob("solexecbench-scale-*-logs.tar.gz")):
        if match not in archive.name:
            continue
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                name = member.name
                if not (member.isfile() and name.startswith("reports/") and name.endswith(".json")):
                    continue
                data = tar.extractfile(member)
                for report in json.load(data).get("reports", []) if data else []:
                    yield f"{archive.name}:{name}", report
    for path in sorted(folder.glob("*/reports/*.json")):
        if match not in path.parent.parent.name:
            continue
        for report in json.loads(path.read_text()).get("reports", []):
            yield str(path), report


def _quartiles(values: list[float]) -> dict[str, float]:
    if len(values) < 2:
        return {"median": values[0]} if values else {}
    q1, median, q3 = statistics.quantiles(values, n=4)
    return {"q1": round(q1, 3), "median": round(median, 3), "q3": round(q3, 3)}


def accuracy(folder: Path, device: str, profile: str, match: str = "") -> dict[str, object]:
    rows = []
    for source, report in scale_reports(folder, match):
        if not str(report.get("device", "")).startswith(device):
            continue
        if report.get("profile") != profile:
            continue
        budget, phases = report.get("budget") or {}, report.get("phases") or {}
        planned = budget.get("planned_s")
        if not planned:
            continue
        probing = sum(phases.get(name, 0.0) for name in PROBING)
        rows.append(
            {
                "report": source,
                "problem": report.get("problem"),
                "planned_s": round(planned, 2),
                "probing_s": round(probing, 2),
                "ratio": round(probing / planned, 3),
                "outside_probing_s": round(report.get("seconds", 0.0) - probing, 2),
                "probes": budget.get("probes_planned"),
                "untried": budget.get("probes_untried"),
            }
        )
    rows.sort(key=lambda row: row["planned_s"])
    ratios = [row["ratio"] for row in rows]
    half = len(rows) // 2
    return {
        "device": device,
        "profile": profile,
        "audits": len(rows),
        "probing / planned": _quartiles(ratios),
        "probing / planned, smaller half of the plans": _quartiles(ratios[:half]),
        "probing / planned, larger half of the plans": _quartiles(ratios[half:]),
        "seconds outside probing": _quartiles([r["outside_probing_s"] for r in rows]),
        "audits that left probes untried": sum(1 for r in rows if r["untried"]),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="folder of results files and their logs")
    parser.add_argument("--device", default="cuda", help="cuda (any GPU), cuda:1, or cpu")
    parser.add_argument("--profile", default="default")
    parser.add_argument("--match", default="", help="only logs whose file name holds this")
    parser.add_argument("--out", type=Path, help="also write every audit's row here")
    args = parser.parse_args()
    result = accuracy(args.folder, args.device, args.profile, args.match)
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rows"}, indent=1))


if __name__ == "__main__":
    main()
