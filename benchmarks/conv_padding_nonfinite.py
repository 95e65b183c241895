"""Where a depthwise transposed convolution with non-finite weights gives NaN: in float32 and
float64, with cuDNN on and off, at SOL-ExecBench L2/036's shapes (its `grad_x` is NaN in float32
where the float64 truth is finite). A direct convolution gives NaN only where the exact result
is one; an algorithm that mixes the taps of a tile (a transform, or zeros multiplied on the
padding) spreads an infinite tap to outputs it does not touch.

    python benchmarks/conv_padding_nonfinite.py --device cuda --out results.json
"""

from __future__ import annotations

import argparse
import json

import torch
import torch.nn.functional as F

SHAPES = (
    (16, 14, 14),
    (8, 28, 28),
    (8, 56, 56),
    (64, 14, 14),
    (1, 14, 14),
    (1, 28, 28),
    (1, 56, 56),
)
"""Batch, height, width of L2/036's workloads (128 channels, 7x7 depthwise taps)."""
CHANNELS = 128


def _run(device: str, dtype: torch.dtype, cudnn: bool, shape: tuple[int, int, int]) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    batch, height, width = shape
    upstream = torch.randn(batch, CHANNELS, height, width, generator=generator)
    weight = torch.randn(CHANNELS, 1, 7, 7, generator=generator)
    weight[1, 0, 0, 0] = float("inf")
    weight[5, 0, 6, 2] = float("-inf")
    weight[9, 0, 3, 3] = float("nan")
    # one infinite tap in every position of the 7x7, a channel each: the taps that fall on the
    # padding at a border differ from corner to corner
    for tap in range(49):
        weight[16 + tap, 0, tap // 7, tap % 7] = float("inf") if tap % 2 else float("-inf")
    with torch.backends.cudnn.flags(enabled=cudnn):
        out = F.conv_transpose2d(
            upstream.to(device, dtype), weight.to(device, dtype), padding=3, groups=CHANNELS
        )
    return out.cpu()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out")
    args = parser.parse_args()
    rows = []
    for shape in SHAPES:
        truth = _run("cpu", torch.float64, False, shape)
        for dtype in (torch.float32, torch.float64):
            for cudnn in (True, False):
                out = _run(args.device, dtype, cudnn, shape)
                extra = torch.isnan(out) & ~torch.isnan(truth)
                rows.append(
                    {
                        "shape": list(shape),
                        "dtype": str(dtype),
                        "cudnn": cudnn,
                        "nan": int(torch.isnan(out).sum()),
                        "cpu_float64_nan": int(torch.isnan(truth).sum()),
                        "nan_where_the_cpu_float64_is_not": int(extra.sum()),
                        "channels_with_such_nan": sorted(set(extra.nonzero()[:, 1].tolist())),
                    }
                )
    name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    document = {"device": name, "torch": torch.__version__, "runs": rows}
    print(json.dumps(document, indent=1))
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(document, handle, indent=1)


if __name__ == "__main__":
    main()
