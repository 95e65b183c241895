"""What a SOL-ExecBench problem's own input generator costs per call, its plain draws made by
torch on one core and on several (`inputs.draws.spread_global_draws`), at each size given.

    python benchmarks/generator_draws.py \
        build/solexecbench/L1/001_attention_softmax_dropout_value_matmul_backward \
        '{"batch_size": 8, "seq_len_q": 128, "seq_len_kv": 128}'
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from kernelaudit.inputs import draws


def main() -> None:
    definition = json.loads((Path(sys.argv[1]) / "definition.json").read_text())
    module: dict[str, object] = {}
    exec(definition["reference"], module)  # the benchmark's own source, as its harness runs it
    get_inputs = module[definition["custom_inputs_entrypoint"]]
    print("threads", torch.get_num_threads())
    for sizes in map(json.loads, sys.argv[2:]):
        for spread in (False, True):
            runs = []
            for _ in range(3):
                torch.manual_seed(0)
                began = time.perf_counter()
                if spread:
                    with draws.spread_global_draws():
                        get_inputs(sizes, "cpu")  # type: ignore[operator]
                else:
                    get_inputs(sizes, "cpu")  # type: ignore[operator]
                runs.append(time.perf_counter() - began)
            how = "several cores" if spread else "one core"
            print(f"{sizes}: {how}, {statistics.median(runs):.3f} s a call", flush=True)


if __name__ == "__main__":
    main()
