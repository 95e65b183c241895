"""Audits sharing a host: one audit alone, then one per GPU at once, for one or more versions of
kernelaudit, with where each audit's time went.

    python benchmarks/judging_contention.py --problem PATH --candidate SPEC --profile quick \\
        --version before=.before/src --version after=src --out contention.json

Each audit is `python -m kernelaudit.cli check PROBLEM CANDIDATE --device cuda:N` in a process
of its own, with PYTHONPATH set to the version's source folder, as a user or `kernelaudit
corpus` would start them; "together" starts one on every GPU at the same moment. The record
keeps each audit's wall seconds, its verdict and its report's `phases` (judging among them),
so a slowdown of audits that share a host shows as the phase that grew. `--candidate reference`
audits the problem's own reference (a SOL-ExecBench problem folder) through the shim solution of
`benchmarks/solexecbench_scale.py`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from solexecbench_scale import write_shim


def _audit(
    source: Path, problem: str, candidate: str, profile: str, device: str, scratch: Path
) -> subprocess.Popen[bytes]:
    report = scratch / f"{device.replace(':', '')}.json"
    env = {**os.environ, "PYTHONPATH": str(source.resolve()), "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "kernelaudit.cli", "check", problem, candidate]
    command += ["--profile", profile, "--device", device, "--json", str(report)]
    log = (scratch / f"{device.replace(':', '')}.log").open("wb")
    return subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)


def _collect(scratch: Path, device: str, seconds: float, code: int) -> dict[str, Any]:
    report = scratch / f"{device.replace(':', '')}.json"
    row: dict[str, Any] = {"device": device, "wall_s": round(seconds, 2), "exit_code": code}
    if report.exists():
        found = json.loads(report.read_text())["reports"][0]
        row |= {
            "verdict": found["verdict"],
            "seconds": found["seconds"],
            "phases": found["phases"],
            "check_seconds": found.get("check_seconds", {}),
            "cases": len(found["cases"]),
        }
    else:
        log = (scratch / f"{device.replace(':', '')}.log").read_text(errors="replace")
        row["log_tail"] = log[-2000:]
    return row


def _round(
    source: Path, problem: str, candidate: str, profile: str, devices: list[str]
) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as folder:
        scratch = Path(folder)
        began = time.perf_counter()
        running = {d: _audit(source, problem, candidate, profile, d, scratch) for d in devices}
        rows = []
        for device, process in running.items():
            code = process.wait()
            rows.append(_collect(scratch, device, time.perf_counter() - began, code))
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", required=True)
    parser.add_argument("--candidate", required=True)
    parser.add_argument("--profile", default="quick")
    parser.add_argument(
        "--version", action="append", required=True, help="NAME=SOURCE_FOLDER (repeatable)"
    )
    parser.add_argument("--out", type=Path, default=Path("judging-contention.json"))
    args = parser.parse_args()

    candidate = args.candidate
    if candidate == "reference":
        shims = Path(tempfile.mkdtemp(prefix="shims-"))
        candidate = str(write_shim(Path(args.problem), shims))
    gpus = [f"cuda:{i}" for i in range(torch.cuda.device_count())] or ["cpu"]
    record: dict[str, Any] = {
        "problem": args.problem,
        "profile": args.profile,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none",
        "gpus": len(gpus),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "runs": [],
    }
    for version in args.version:
        name, _, source = version.partition("=")
        for mode, devices in (("alone", gpus[:1]), ("together", gpus)):
            rows = _round(Path(source), args.problem, candidate, args.profile, devices)
            record["runs"].append({"version": name, "mode": mode, "audits": rows})
            args.out.write_text(json.dumps(record, indent=1))
            judging = [r.get("phases", {}).get("judging") for r in rows]
            walls = [r["wall_s"] for r in rows]
            print(f"{name:8} {mode:8} wall {walls} judging {judging}", flush=True)


if __name__ == "__main__":
    main()
