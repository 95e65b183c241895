"""Check that event timing agrees with the profiler's kernel time; print the roofline fraction.

    PYTHONPATH=src python benchmarks/timing_agreement.py --device cuda --out timing.json

Times a compute-bound bf16 matmul (4096^3) and two memory-bound kernels over 2^28 fp16
elements (an add and a row softmax) with `time_calls`, profiles each with `profile_kernels`, and
prints the event time, the kernel time, their gap and the fraction of the device's measured
roofline. Exits with status 1 when a gap is a mismatch (over 5% on a call whose kernels take at
least 50 us). On a CPU the sizes shrink and there is no kernel time: a smoke run only.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelaudit.timing import (
    agreement,
    derived_bytes,
    derived_flops,
    format_seconds,
    is_mismatch,
    measure_roofline,
    position,
    profile_kernels,
    time_calls,
)


@dataclass(frozen=True)
class Workload:
    name: str
    fn: Callable[..., torch.Tensor]
    args: tuple[torch.Tensor, ...]


def workloads(device: torch.device) -> list[Workload]:
    on_cuda = device.type == "cuda"
    n = 4096 if on_cuda else 512
    elements = 2**28 if on_cuda else 2**22
    columns = 8192 if on_cuda else 1024
    half = torch.float16

    def tensor(*shape: int, dtype: torch.dtype = half) -> torch.Tensor:
        return torch.randn(*shape, dtype=dtype, device=device)

    return [
        Workload(
            f"matmul bf16 {n}^3",
            torch.matmul,
            (tensor(n, n, dtype=torch.bfloat16), tensor(n, n, dtype=torch.bfloat16)),
        ),
        Workload(f"add fp16 {elements} elements", torch.add, (tensor(elements), tensor(elements))),
        Workload(
            f"softmax fp16 {elements // columns}x{columns} rows",
            lambda x: torch.softmax(x, dim=-1),
            (tensor(elements // columns, columns),),
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--out", type=Path, default=Path("timing-agreement.json"))
    parser.add_argument("--refresh-roofline", action="store_true", help="measure the roofline anew")
    args = parser.parse_args()

    device = torch.device(args.device)
    roofline = measure_roofline(device, refresh=args.refresh_roofline)
    rates = ", ".join(f"{k} {v / 1e12:.3g} TFLOP/s" for k, v in roofline.flops_per_s.items())
    bandwidth = roofline.bandwidth_bytes_per_s / 1e12
    print(f"roofline of {roofline.device}: {bandwidth:.3g} TB/s; {rates}")
    print(f"  ({roofline.method})")
    rows = []
    mismatches = 0
    for workload in workloads(device):
        output = workload.fn(*workload.args)
        flops = derived_flops(workload.fn, workload.args)
        bytes_ = derived_bytes([*workload.args, output])
        del output

        def call(workload: Workload = workload) -> torch.Tensor:
            return workload.fn(*workload.args)

        timing = time_calls(call, device)
        profile = profile_kernels(call, device)
        gap, sentence = agreement(timing, profile)
        mismatch = is_mismatch(gap, profile)
        mismatches += mismatch
        place = position(timing.median_s, flops, bytes_, workload.args[0].dtype, roofline)
        gap_text = "n/a" if math.isnan(gap) else f"{gap:.1%}"
        print(
            f"\n{workload.name}: event {format_seconds(timing.median_s)} "
            f"(p10 {format_seconds(timing.p10_s)}, p90 {format_seconds(timing.p90_s)}, "
            f"{timing.repetitions} reps), kernel {format_seconds(profile.busy_s)}, "
            f"gap {gap_text}{' MISMATCH' if mismatch else ''}, "
            f"roofline fraction {place.fraction:.0%} ({place.bound}-bound)"
        )
        print(f"  {sentence}")
        print(f"  {place.text}")
        for kernel in profile.kernels[:3]:
            print(
                f"  {format_seconds(kernel.seconds):>9}  x{kernel.launches:g}  {kernel.name[:90]}"
            )
        rows.append(
            {
                "workload": workload.name,
                "flops": flops,
                "bytes": bytes_,
                "timing": timing.to_json(),
                "profile": profile.to_json(),
                "gap": None if math.isnan(gap) else gap,
                "mismatch": mismatch,
                "agreement": sentence,
                "roofline_position": place.to_json(),
            }
        )
    document = {
        "device": roofline.device,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "roofline": roofline.to_json(),
        "workloads": rows,
    }
    args.out.write_text(json.dumps(document, indent=2, allow_nan=False))
    print(f"\nwrote {args.out}; {mismatches} mismatch(es)")
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
