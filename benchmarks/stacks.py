"""Where an audit's time goes when it prints nothing: audit SOL-ExecBench problems, each with its
own reference as the candidate, in a `kernelaudit check` process whose threads' Python stacks
are written every `--every` seconds, until the audit ends or `--limit` passes.

    python benchmarks/stacks.py SOLEXECBENCH_ROOT L2/047_ L2/016_ --out stacks/ --limit 100
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from solexecbench_scale import problem_folders, problem_id, write_shim

CHILD = (
    "import faulthandler, runpy, sys\n"
    "out = open(sys.argv[1], 'w')\n"
    "faulthandler.dump_traceback_later(float(sys.argv[2]), repeat=True, file=out)\n"
    "sys.argv = ['kernelaudit'] + sys.argv[3:]\n"
    "runpy.run_module('kernelaudit', run_name='__main__', alter_sys=True)\n"
)
"""A `kernelaudit` run whose threads' stacks go to the file `argv[1]` every `argv[2]` seconds
(`python -c CHILD STACKS EVERY check ...`)."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("root", type=Path)
    parser.add_argument("problems", nargs="+", help="prefixes of level/problem names")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--every", type=float, default=10.0)
    parser.add_argument("--limit", type=float, default=100.0)
    parser.add_argument("--profile", default="default")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    folders = problem_folders(args.root)
    for prefix in args.problems:
        matches = [f for f in folders if problem_id(f).startswith(prefix)]
        if len(matches) != 1:
            print(f"{prefix}: {len(matches)} problems match; name one", file=sys.stderr)
            return 2
        folder = matches[0]
        slug = problem_id(folder).replace("/", "__")
        solution = write_shim(folder, args.out / "shims")
        check = ["check", str(folder), str(solution), "--profile", args.profile]
        check += ["--device", args.device, "--json", str(args.out / f"{slug}.json")]
        command = [sys.executable, "-c", CHILD, str(args.out / f"{slug}.stacks.txt")]
        command += [str(args.every), *check]
        began = time.monotonic()
        with (args.out / f"{slug}.log").open("wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
            try:
                code: int | None = process.wait(args.limit)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                code = None
        print(f"{slug}: exit {code} after {time.monotonic() - began:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
