"""Which of PyTorch's operations give a batch element another result when the batch holds more
than 2^31 elements: each operation of a VAE decoder's mid block (SOL-ExecBench L2/050, whose
reference failed the large-tensors check as its own candidate) run on a batch past the limit,
its first and last elements compared with the same elements computed alone.

    python benchmarks/large_batch_ops.py --batch 4100 --out large-batch-ops.json

With --sol, a SOL-ExecBench problem's whole reference instead, its inputs drawn from N(0, 1) as
the large-tensors check draws them: the last rows of a batch past the limit against the same
rows alone, with TF32 as PyTorch sets it and then off, and where the two differ.

    python benchmarks/large_batch_ops.py --sol PROBLEM_DIR --axis batch_size --batch 4100 \
        --out large-batch-reference.json

Needs a GPU with about 80 GiB free at the default batch (the VAE block's reference: 120).
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


def _reference_rows(folder: Path, axis: str, batch: int, rows: int) -> dict[str, object]:
    """The problem's reference on a batch of `batch` along `axis` against its last `rows`
    computed alone, per TF32 setting."""
    definition = json.loads((folder / "definition.json").read_text())
    workload = json.loads((folder / "workload.jsonl").read_text().splitlines()[0])
    sizes = {k: v["value"] for k, v in definition["axes"].items() if v.get("type") == "const"}
    sizes.update(workload["axes"])
    sizes[axis] = batch
    namespace: dict[str, object] = {}
    exec(compile(definition["reference"], str(folder / "definition.json"), "exec"), namespace)
    run = namespace["run"]
    assert callable(run)
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs: dict[str, object] = {}
    along: dict[str, int] = {}
    for name, spec in definition["inputs"].items():
        if spec["shape"] is None:
            inputs[name] = workload["inputs"][name]["value"]
            continue
        shape = [int(sizes[d]) if not str(d).isdigit() else int(d) for d in spec["shape"]]
        if axis in spec["shape"]:
            along[name] = spec["shape"].index(axis)
        dtype = getattr(torch, spec["dtype"])
        inputs[name] = torch.randn(shape, device="cuda", generator=g).to(dtype)
    alone_inputs = {
        n: t.narrow(along[n], batch - rows, rows).contiguous() if n in along else t
        for n, t in inputs.items()
    }
    out: dict[str, object] = {"sizes": sizes, "rows": rows}
    for tf32 in (True, False):
        torch.backends.cuda.matmul.allow_tf32 = tf32 and torch.backends.cuda.matmul.allow_tf32
        torch.backends.cudnn.allow_tf32 = tf32
        began = time.perf_counter()
        whole = run(**inputs)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        last = whole.narrow(0, batch - rows, rows).clone()
        del whole
        torch.cuda.empty_cache()
        alone = run(**alone_inputs)
        diff = (last - alone).abs().double()
        rms = float(alone.double().pow(2).mean().sqrt())
        far = diff > 1e-2 * rms
        where = far.nonzero()[:8].tolist()
        out[f"tf32 {'as set' if tf32 else 'off'}"] = {
            "seconds": round(seconds, 3),
            "largest difference over the rms": float(diff.max()) / rms,
            "elements over 1% of the rms": int(far.sum()),
            "of elements": diff.numel(),
            "first of them": where,
        }
        print(tf32, out[f"tf32 {'as set' if tf32 else 'off'}"], flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=4100)
    parser.add_argument("--channels", type=int, default=512)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sol", type=Path, help="a SOL-ExecBench problem folder")
    parser.add_argument("--axis", default="batch_size")
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--no-tf32", action="store_true", help="operations: cuDNN's TF32 off")
    args = parser.parse_args()
    if args.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    if args.sol is not None:
        found = _reference_rows(args.sol, args.axis, args.batch, args.rows)
        found.update(device=torch.cuda.get_device_name(), torch=torch.__version__)
        args.out.write_text(json.dumps(found, indent=1))
        return
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
