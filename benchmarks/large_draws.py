"""What drawing one very large floating input costs on the host: the pages touched, torch's own
normal draw filled in pieces on this process's share of the cores (how `inputs.draws` drew
before it drew through NumPy), and `inputs.draws.randn` now, at the given dtype and in float64
(what kernelaudit's own distributions draw before rounding).

    python benchmarks/large_draws.py --elements 4294967296 --dtype float16 --out draws.json
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

from kernelaudit.inputs import draws


def _timed(step: Callable[[], torch.Tensor]) -> float:
    began = time.perf_counter()
    value = step()
    seconds = time.perf_counter() - began
    del value
    return seconds


def _torch_pieces(n: int, dtype: torch.dtype) -> torch.Tensor:
    """torch's normal draw, a generator of its own per piece, the pieces in threads."""
    out = torch.empty(n, dtype=dtype)
    pieces = math.ceil(n / draws.CHUNK)

    def piece(k: int) -> None:
        generator = torch.Generator().manual_seed(k)
        out[k * draws.CHUNK : (k + 1) * draws.CHUNK].normal_(generator=generator)

    with ThreadPoolExecutor(torch.get_num_threads()) as pool:
        list(pool.map(piece, range(pieces)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elements", type=int, default=1 << 30)
    parser.add_argument("--dtype", default="float16")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    dtype = getattr(torch, args.dtype)
    n = args.elements
    seconds: dict[str, float] = {}
    seconds["zeroed (pages touched)"] = _timed(lambda: torch.zeros(n, dtype=dtype))
    for at in dict.fromkeys((dtype, torch.float64)):
        name = str(at).removeprefix("torch.")
        seconds[f"torch's normal at {name}, in pieces"] = _timed(lambda at=at: _torch_pieces(n, at))
        seed = torch.Generator().manual_seed(0)
        seconds[f"draws.randn at {name}"] = _timed(lambda g=seed, at=at: draws.randn((n,), g, at))
    record = {
        "elements": n,
        "dtype": args.dtype,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "cpu capability": torch.backends.cpu.get_cpu_capability(),
        "machine": platform.node(),
        "seconds": {k: round(v, 3) for k, v in seconds.items()},
        "million elements a second": {k: round(n / v / 1e6, 1) for k, v in seconds.items()},
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
