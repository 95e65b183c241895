"""Which of PyTorch's operations give a batch element another result when the batch holds more
than 2^31 elements: each operation of a VAE decoder's mid block (SOL-ExecBench L2/050, whose
reference failed the large-tensors check as its own candidate) run on a batch past the limit,
its first and last elements compared with the same elements computed alone.

    python benchmarks/large_batch_ops.py --batch 4100 --out large-batch-ops.json

Needs a GPU with about 80 GiB free at the default batch.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

Op = Callable[[torch.Tensor], torch.Tensor]


def _ops(channels: int, device: str) -> dict[str, tuple[tuple[int, ...], Op]]:
    """Each operation, with the shape of one batch element of its input."""
    g = torch.Generator(device=device).manual_seed(0)
    weight = torch.randn(channels, channels, 3, 3, device=device, generator=g) * 0.02
    linear = torch.randn(channels, channels, device=device, generator=g) * 0.04
    norm_weight = 1 + 0.25 * torch.randn(channels, device=device, generator=g)
    seq = 32 * 32
    return {
        "group_norm": ((channels, 32, 32), lambda x: F.group_norm(x, 32, norm_weight, None, 1e-6)),
        "silu": ((channels, 32, 32), F.silu),
        "conv2d 3x3": ((channels, 32, 32), lambda x: F.conv2d(x, weight, padding=1)),
        "linear": ((seq, channels), lambda x: F.linear(x, linear)),
        "q @ k^T": ((1, seq, channels), lambda x: torch.matmul(x, x.transpose(-2, -1))),
        "softmax": ((1, seq, seq), lambda x: F.softmax(x, dim=-1)),
        "probs @ v": (
            (1, seq, seq),
            lambda x: torch.matmul(F.softmax(x, -1), x[..., :channels].contiguous()),
        ),
    }


def _compare(op: Op, shape: tuple[int, ...], batch: int, device: str) -> dict[str, object]:
    g = torch.Generator(device=device).manual_seed(1)
    x = torch.randn(batch, *shape, device=device, generator=g)
    began = time.perf_counter()
    try:
        whole = op(x)
        torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        return {"skipped": "out of device memory"}
    seconds = time.perf_counter() - began
    out: dict[str, object] = {"input elements": x.numel(), "output elements": whole.numel()}
    for name, index in (("first", 0), ("last", batch - 1)):
        alone = op(x[index : index + 1].clone())
        diff = (whole[index : index + 1] - alone).abs()
        scale = alone.abs().max().clamp_min(1e-30)
        out[f"{name}: largest difference over largest value"] = float(diff.max() / scale)
    out["seconds"] = round(seconds, 3)
    del x, whole
    torch.cuda.empty_cache()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4100)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    device = "cuda"
    results = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "batch": args.batch,
        "tf32 matmul": torch.backends.cuda.matmul.allow_tf32,
        "tf32 cudnn": torch.backends.cudnn.allow_tf32,
        "ops": {},
    }
    for name, (shape, op) in _ops(args.channels, device).items():
        results["ops"][name] = _compare(op, shape, args.batch, device)
        print(name, results["ops"][name], flush=True)
    args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
