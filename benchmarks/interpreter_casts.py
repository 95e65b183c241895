"""Whether the faster float casts of `interpret.casts` give Triton's interpreter's bits, over
every float32 value, and what one cast of a block costs each way.

    python benchmarks/interpreter_casts.py [--chunks 64] > interpreter-casts.txt

Float32 to float16: every one of the 2^32 float32 bit patterns (in `--chunks` pieces; fewer
check a prefix), torch's conversion against NumPy's `astype`, which the interpreter uses; the
NaNs, whose payloads the two keep differently, are counted apart (`interpret.casts` takes
NumPy's for them). Then a (2048, 256) block, the training check's cross-entropy gradient, cast
each way on one thread, and the same for bfloat16 and float32 against the interpreter's own
`_convert_float`.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np
import torch
import triton.language as tl
from triton.runtime import interpreter

from kernelaudit.interpret import casts


def _timed(work: object, repeats: int = 20) -> float:
    began = time.perf_counter()
    for _ in range(repeats):
        work()  # type: ignore[operator]
    return (time.perf_counter() - began) / repeats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chunks", type=int, default=64, help="of 2^26 patterns each (64: all)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    differ = nan_differ = 0
    began = time.perf_counter()
    step = 1 << 26
    for start in range(0, args.chunks * step, step):
        bits = np.arange(start, start + step, dtype=np.uint64).astype(np.uint32)
        values = bits.view(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            numpy_bits = values.astype(np.float16).view(np.uint16)
        torch_bits = torch.from_numpy(values).to(torch.float16).numpy().view(np.uint16)
        different, nan = numpy_bits != torch_bits, np.isnan(values)
        differ += int(np.count_nonzero(different & ~nan))
        nan_differ += int(np.count_nonzero(different & nan))
    print(
        f"float32 -> float16 over {args.chunks * step:,} float32 bit patterns: "
        f"{differ} non-NaN values differ, {nan_differ} NaNs differ "
        f"({time.perf_counter() - began:.0f} s)"
    )
    rng = np.random.default_rng(0)
    for scale, what in ((1.0, "N(0, 1)"), (1e-5, "N(0, 1e-5), float16's subnormal range")):
        block = (rng.standard_normal((2048, 256)) * scale).astype(np.float32)
        block[:, ::8] = 0.0  # a masked load's `other=0`
        with np.errstate(over="ignore"):
            numpy_s = _timed(lambda: block.astype(np.float16))  # noqa: B023
        short_s = _timed(lambda: casts.to_float16(block))  # noqa: B023
        print(
            f"float32 -> float16, (2048, 256) of {what}: "
            f"NumPy {numpy_s * 1e3:.2f} ms, torch {short_s * 1e3:.2f} ms"
        )
    brain = casts.float32_to_bfloat16(block)
    own_s = _timed(lambda: interpreter._convert_float(block, tl.float32, tl.bfloat16, None), 5)
    short_s = _timed(lambda: casts.float32_to_bfloat16(block))
    print(
        f"float32 -> bfloat16, (2048, 256): "
        f"interpreter {own_s * 1e3:.2f} ms, shift {short_s * 1e3:.2f} ms"
    )
    own_s = _timed(lambda: interpreter._convert_float(brain, tl.bfloat16, tl.float32, None), 5)
    short_s = _timed(lambda: casts.bfloat16_to_float32(brain))
    print(
        f"bfloat16 -> float32, (2048, 256): "
        f"interpreter {own_s * 1e3:.2f} ms, shift {short_s * 1e3:.2f} ms"
    )
    print(f"numpy {np.__version__}, torch {torch.__version__}")


if __name__ == "__main__":
    main()
