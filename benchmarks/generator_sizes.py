"""What a SOL-ExecBench problem's input generator costs across the sizes one audit calls it at,
and whether another version of the code gives the same bits.

    python benchmarks/generator_sizes.py build/solexecbench/L1/092_gqa_attention_with_qk_norm \\
        (--sizes '{"batch_size": 1, "seq_len": 128}' ... | --report audit.json) \\
        [--out record.json] [--digests digests.json]

The generator (`inputs.generated.generator_values`, as `materialize` calls it, seed 0) is called
once per sizes given (or per sizes the cases of an audit's JSON report were made at, in the
report's order), one after the other, in one process with a fresh store of kept draws, and
each call is timed on the wall clock. `--digests` writes a SHA-256 of every value by sizes and
name, so two versions' values can be compared file to file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import time
from pathlib import Path

import torch

from kernelaudit.formats.solexecbench.definition import read_definition
from kernelaudit.inputs.generated import generator_values
from kernelaudit.inputs.reuse import DRAWS
from kernelaudit.problem.spec import ScalarInput


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--sizes", nargs="+", default=[], help="JSON objects of axis sizes")
    parser.add_argument("--report", type=Path, help="an audit's JSON report: its cases' sizes")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--digests", type=Path)
    args = parser.parse_args()
    problem = read_definition(args.folder)
    assert problem.sampler is not None, "the problem has no input generator"
    wanted = [inp.name for inp in problem.inputs if not isinstance(inp, ScalarInput)]
    fixed = problem.workloads[0].as_dict()
    rows, digests = [], {}
    for text in args.sizes + (_report_sizes(args.report) if args.report else []):
        sizes = {**fixed, **json.loads(text)}
        began = time.perf_counter()
        values = generator_values(problem, sizes, 0, wanted, DRAWS)
        seconds = time.perf_counter() - began
        elements = sum(v.numel() for v in values.values() if isinstance(v, torch.Tensor))
        rows.append({"sizes": json.loads(text), "seconds": round(seconds, 3), "elements": elements})
        print(f"{text}: {seconds:.2f} s, {elements:,} elements")
        digests[text] = {
            name: hashlib.sha256(v.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()
            for name, v in values.items()
            if isinstance(v, torch.Tensor)
        }
    total = sum(r["seconds"] for r in rows)
    print(f"all sizes: {total:.2f} s, {torch.get_num_threads()} threads")
    if args.out:
        record = {
            "problem": args.folder.name,
            "host": platform.node(),
            "threads": torch.get_num_threads(),
            "torch": torch.__version__,
            "total_s": round(total, 3),
            "calls": rows,
        }
        args.out.write_text(json.dumps(record, indent=1) + "\n")
    if args.digests:
        args.digests.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


def _report_sizes(path: Path) -> list[str]:
    report = json.loads(path.read_text())
    report = report["reports"][0] if "reports" in report else report
    found: list[str] = []
    for case in report.get("cases", []):
        text = json.dumps(case["case"]["sizes"], sort_keys=True)
        if text not in found:
            found.append(text)
    return found


if __name__ == "__main__":
    main()
