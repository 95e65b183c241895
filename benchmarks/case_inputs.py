"""How long making one problem's cases takes: the default values at its first workload, then
the same workload with one input drawn from each of several distributions (as an audit's
numerics cases are), one after another in this process.

    python benchmarks/case_inputs.py ../shared/solexecbench/L2/002_decoder_layer_full_block \\
        --input hidden_states --kept-gib 8

--kept-gib sets how many bytes of large draws are kept (`kernelaudit.inputs.reuse`), as a
host with 16 times as much memory keeps: a small machine's own share may be too small to keep
a layer's weights, and then every case draws them again.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from kernelaudit.formats import read_problem
from kernelaudit.inputs.case import Case
from kernelaudit.inputs.materialize import materialize
from kernelaudit.inputs.reuse import DRAWS

DISTRIBUTIONS = ("uniform", "heavy_tailed", "large", "offset", "tiny", "normal")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", help="a problem file or folder kernelaudit reads")
    parser.add_argument("--input", required=True, help="the input the later cases draw anew")
    parser.add_argument("--kept-gib", type=float, default=None)
    args = parser.parse_args()
    if args.kept_gib is not None:
        DRAWS.most_bytes = int(args.kept_gib * 2**30)
    problem = read_problem(args.problem)
    sizes = tuple(sorted(problem.workloads[0].as_dict().items()))
    cases = [Case(sizes, label="workload 0")]
    cases += [Case(sizes, values=((args.input, d),), label="workload 0") for d in DISTRIBUTIONS]
    seconds = []
    for case in cases:
        began = time.perf_counter()
        materialize(problem, case)
        seconds.append(round(time.perf_counter() - began, 3))
    print(
        json.dumps(
            {
                "problem": problem.name,
                "kept_bytes": DRAWS.most_bytes,
                "seconds": seconds,
                "later_median_s": statistics.median(seconds[2:]),
            }
        )
    )


if __name__ == "__main__":
    main()
