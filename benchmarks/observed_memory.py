"""What the auditor's own look at a call's memory costs (`runner.auditor.observed`): one invocation
of a destination-passing candidate (y = 2x into its slot) through a worker, with the calls'
buffers in the arena the auditor reads (as audits run: shared memory on a CPU, device memory
lent to the worker on a GPU), against the same invocation with the arena withheld (the
worker's memory of its own, only the worker's checks).

    python benchmarks/observed_memory.py --out observed-memory.json [--sizes-mib 1 16 64]
        [--device cuda]

For each input size, `--repeats` invocations of `--calls` calls each, alternating the two ways
after a warm-up of each; the median seconds per invocation are recorded.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

import torch

from kernelaudit.runner.auditor import process
from kernelaudit.runner.boundary import arena as arenas
from kernelaudit.runner.boundary import lent
from kernelaudit.runner.boundary.messages import Call, Invocation, OutputSlot, TensorArg
from kernelaudit.runner.candidate import parse_candidate

_CANDIDATE = """
import torch


def double(x, out):
    torch.mul(x, 2, out=out)
"""


def _invocation(mib: int, calls: int, layout: str) -> Invocation:
    x = torch.randn(mib << 18)  # float32: MiB << 18 elements
    call = Call(args=(TensorArg(x, layout),), slots=(OutputSlot(tuple(x.shape), x.dtype),))
    return Invocation(calls=(call,) * calls, return_inputs=(0,))


def _seconds(worker: process.Worker, invocation: Invocation, arena: bool) -> tuple[float, bool]:
    sizing = arenas.arena_bytes
    if not arena:  # the arena withheld: nothing placed in it
        arenas.arena_bytes = lent.arena_bytes = lambda calls: 0
    try:
        began = time.perf_counter()
        result = worker.run(invocation)
        took = time.perf_counter() - began
    finally:
        arenas.arena_bytes = lent.arena_bytes = sizing
    assert result.error == "", result.error
    return took, bool(result.placements)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 64])
    parser.add_argument("--calls", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--layout", default="contiguous")
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    folder = options.out.parent.resolve()
    source = folder / "observed_memory_candidate.py"
    source.write_text(_CANDIDATE)
    rows = []
    try:
        candidate = parse_candidate(f"{source}::double")
        with process.Worker(candidate, options.device, timeout_s=600.0) as worker:
            for mib in options.sizes_mib:
                invocation = _invocation(mib, options.calls, options.layout)
                times: dict[bool, list[float]] = {True: [], False: []}
                # the arena is set aside where it fits: on a CPU in the region's bound (a
                # sixteenth of the host's memory, `limits.region_most_bytes`), on a GPU within
                # `lent.lent_most_bytes`
                placed = _seconds(worker, invocation, True)[1]
                _seconds(worker, invocation, False)  # warm-up
                for _ in range(options.repeats):
                    for arena in (True, False):
                        times[arena].append(_seconds(worker, invocation, arena)[0])
                with_arena = statistics.median(times[True])
                without = statistics.median(times[False])
                rows.append(
                    {
                        "input_mib": mib,
                        "calls": options.calls,
                        "layout": options.layout,
                        "device": options.device,
                        "placed_in_arena": placed,
                        "arena_s": with_arena,
                        "own_memory_s": without,
                        "ratio": with_arena / without,
                    }
                )
                print(
                    f"{mib:5d} MiB x {options.calls} calls: arena {with_arena * 1e3:8.1f} ms, "
                    f"own memory {without * 1e3:8.1f} ms ({with_arena / without:.2f}x)"
                    + ("" if placed else ", no arena: past its bound")
                )
    finally:
        source.unlink(missing_ok=True)
    options.out.write_text(
        json.dumps(
            {
                "benchmark": "observed_memory",
                "torch": torch.__version__,
                "device": options.device,
                "gpu": torch.cuda.get_device_name() if options.device != "cpu" else "",
                "machine": platform.processor() or platform.machine(),
                "threads": torch.get_num_threads(),
                "date": time.strftime("%Y-%m-%d"),
                "rows": rows,
            },
            indent=2,
        )
        + "\n"
    )


if __name__ == "__main__":
    main()
