"""What the sandbox costs: the same audits with candidates under bubblewrap and as plain
processes (`KERNELAUDIT_SANDBOX=off`), alternated round by round so a drift of the machine
shows in both, each audit in a fresh process as a user's command would be.

    python benchmarks/sandbox_overhead.py --rounds 3 --out sandbox.json
    python benchmarks/sandbox_overhead.py --sol path/to/solexecbench/L1/016_... --device cuda

Without --sol it audits the bundled layernorm example's passing candidate. The record has every
audit's seconds and phases, and the median of each mode with their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def one_audit(problem: str, candidate: str, profile: str, device: str, sandbox: bool) -> dict:
    env = dict(os.environ)
    env["KERNELAUDIT_SANDBOX"] = "on" if sandbox else "off"
    with tempfile.TemporaryDirectory() as folder:
        report = Path(folder) / "report.json"
        command = [
            sys.executable, "-m", "kernelaudit.cli", "check", problem, candidate,
            "--profile", profile, "--device", device, "--json", str(report),
        ]  # fmt: skip
        began = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=folder)
        wall = time.perf_counter() - began
        if not report.is_file():
            raise SystemExit(f"the audit wrote no report (exit {done.returncode}):\n{done.stderr}")
        data = json.loads(report.read_text())["reports"][0]
    return {
        "sandbox": sandbox,
        "wall_s": round(wall, 3),
        "audit_s": data["seconds"],
        "isolation": data.get("isolation", ""),
        "verdict": data["verdict"],
        "phases": data["phases"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sol", type=Path, help="a SOL-ExecBench problem folder")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    if args.sol is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        from solexecbench_scale import write_shim

        shims = Path(tempfile.mkdtemp(prefix="kernelaudit-shim-"))
        problem, candidate = str(args.sol.resolve()), str(write_shim(args.sol, shims))
    else:
        example = ROOT / "examples" / "layernorm"
        problem = str(example / "problem.py")
        candidate = f"{example / 'candidates.py'}::masked_statistics"

    runs = []
    for round_ in range(args.rounds):
        for sandbox in (True, False) if round_ % 2 == 0 else (False, True):
            run = one_audit(problem, candidate, args.profile, args.device, sandbox)
            runs.append(run)
            print(f"round {round_ + 1}: sandbox={sandbox} {run['audit_s']:.1f} s "
                  f"({run['isolation']})", flush=True)  # fmt: skip
    confined = [r["audit_s"] for r in runs if r["sandbox"]]
    plain = [r["audit_s"] for r in runs if not r["sandbox"]]
    summary = {
        "median_sandboxed_s": statistics.median(confined),
        "median_plain_s": statistics.median(plain),
        "ratio": round(statistics.median(confined) / statistics.median(plain), 3),
    }
    record = {
        "date": time.strftime("%Y-%m-%d"),
        "problem": problem,
        "candidate": candidate,
        "profile": args.profile,
        "device": args.device,
        "runs": runs,
        "summary": summary,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
