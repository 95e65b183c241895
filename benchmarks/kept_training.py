"""What the reference's training runs kept on disk save a candidate's audit: a correct candidate
of each bundled example that trains, audited by `kernelaudit check` three times, each in a
fresh process: once so that its Triton kernels are compiled and cached (with a cache of
kernelaudit's own, given up after), then with an empty cache (the reference's runs made and
kept), then again (the runs read back). Per audit: the command's wall time, the audit's
seconds, the training check's, its seconds by side, where the reference's runs came from, and
the verdict; the judgements of the last two compared (the training finding's evidence but its
seconds).

    python benchmarks/kept_training.py --out kept.json --profile quick [--stop-after 400]

Audits stop being started once `--stop-after` seconds have gone by (the record is written after
each one, so a run cut short keeps what it measured).
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

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = (
    ("embedding_backward", "wide_accumulator"),
    ("rmsnorm_backward", "fp32_partials"),
    ("cross_entropy_backward", "fp32_softmax"),
)
"""A correct candidate of each example wired to a slot of the training model."""
_UNTIMED = ("seconds", "seconds by side", "reference's runs")


def audit(example: str, function: str, profile: str, cache: Path) -> dict[str, Any]:
    folder = ROOT / "examples" / example
    report = Path(tempfile.mkdtemp()) / "report.json"
    command = [
        sys.executable,
        "-m",
        "kernelaudit",
        "check",
        str(folder / "problem.py"),
        f"{folder / 'candidates.py'}::{function}",
        "--profile",
        profile,
        "--json",
        str(report),
    ]
    began = time.perf_counter()
    done = subprocess.run(
        command,
        env={**os.environ, "KERNELAUDIT_CACHE": str(cache)},
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - began
    if not report.is_file():
        return {"wall_s": wall, "error": done.stderr[-2000:]}
    (found,) = json.loads(report.read_text())["reports"]
    training = [f for f in found["findings"] if f["check"] == "training"]
    evidence = training[0]["evidence"] if training else {}
    return {
        "wall_s": round(wall, 2),
        "audit_s": found["seconds"],
        "verdict": found["verdict"],
        "training_s": found["check_seconds"].get("training"),
        "seconds by side": evidence.get("seconds by side"),
        "reference's runs": evidence.get("reference's runs"),
        "judged": {k: v for k, v in evidence.items() if k not in _UNTIMED},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--stop-after", type=float, default=float("inf"))
    args = parser.parse_args()
    began = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for example, function in CANDIDATES:
        cache = Path(tempfile.mkdtemp(prefix="kept-training-"))
        row: dict[str, Any] = {"example": example, "candidate": function}
        for name in ("kernels compiled", "runs made", "runs read back"):
            if time.perf_counter() - began > args.stop_after:
                break
            first = name == "kernels compiled"
            own = Path(tempfile.mkdtemp(prefix="kept-training-")) if first else cache
            row[name] = audit(example, function, args.profile, own)
            print(example, function, name, json.dumps(row[name])[:400], flush=True)
        if "runs read back" in row:
            same = row["runs made"].get("judged") == row["runs read back"].get("judged")
            row["same judgement"] = same
        rows.append(row)
        args.out.write_text(json.dumps({"profile": args.profile, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
