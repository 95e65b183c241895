"""What torch's allocator still holds after common library calls, read the way the `memory`
check reads a call, and who allocated each block still held (the allocator's recorded
history): first each call made plainly (`runner.memory.read_memory` before and after), then
the same calls as the worker makes them (`runner.call.run_invocation`, five measured calls, in
this process), where the check reads what a candidate keeps. With --audit, the `memory`
check of a real audit of the matmul example whose candidate is torch's own product, the
candidate recording the allocator's history from its import on and writing a snapshot at the
start of every call (its worker unsandboxed, so it can write them): the blocks alive then, and
who allocated them.

    python benchmarks/held_memory.py --out held-memory.json [--audit]
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from kernelaudit.runner.call import Watch, run_invocation
from kernelaudit.runner.guard import prepare
from kernelaudit.runner.memory import read_memory
from kernelaudit.runner.messages import Call, Invocation, TensorArg

MiB = 1 << 20


def _linear(emb: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.matmul(emb, weight.t()) + bias


def _linear_chunks(emb: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> tuple:
    return (torch.matmul(emb, weight.t()) + bias).chunk(6, dim=1)


def _fused_linear(emb: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return F.linear(emb, weight, bias)


def _attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v)


def _cases() -> dict[str, tuple[Callable[..., object], tuple[torch.Tensor, ...]]]:
    def linear_args(batch: int, dim: int, out: int, dtype: torch.dtype) -> tuple:
        return (
            torch.randn(batch, dim, dtype=dtype),
            torch.randn(out, dim, dtype=dtype),
            torch.randn(out, dtype=dtype),
        )

    qkv = tuple(torch.randn(2, 8, 512, 64, dtype=torch.bfloat16) for _ in range(3))
    return {
        "matmul + bias, float32, 5 x 3072 -> 18432, six chunks": (
            _linear_chunks,
            linear_args(5, 3072, 18432, torch.float32),
        ),
        "matmul + bias, float32, 2048 x 4096 -> 4096": (
            _linear,
            linear_args(2048, 4096, 4096, torch.float32),
        ),
        "linear, bfloat16, 2048 x 4096 -> 4096": (
            _fused_linear,
            linear_args(2048, 4096, 4096, torch.bfloat16),
        ),
        "scaled_dot_product_attention, bfloat16": (_attention, qkv),
    }


def _holders(snapshot: dict, device_index: int) -> list[dict[str, object]]:
    """Every block still allocated on the device that was allocated while the history was
    recorded, with the frames that allocated it."""
    held = []
    for segment in snapshot["segments"]:
        if segment["device"] != device_index:
            continue
        for block in segment["blocks"]:
            if block["state"] != "active_allocated" or not block.get("frames"):
                continue  # free, or allocated before the history was recorded
            frames = [
                f"{frame['filename']}:{frame['line']} {frame['name']}"
                for frame in block.get("frames", [])
            ]
            held.append(
                {"bytes": block["size"], "stream": segment["stream"], "frames": frames[:16]}
            )
    return sorted(held, key=lambda h: -int(h["bytes"]))[:8]


def plain(function: Callable[..., object], args: tuple, device: torch.device) -> dict:
    placed = tuple(a.to(device) for a in args)
    torch.cuda.memory._record_memory_history(max_entries=100000)
    before = read_memory(device)
    out = function(*placed)
    del out
    after = read_memory(device)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    held = after.allocated - before.allocated
    return {
        "held_bytes": held,
        "reserved_growth_bytes": after.reserved - before.reserved,
        "blocks_allocated_now": _holders(snapshot, device.index) if held else [],
    }


def as_the_worker(
    function: Callable[..., object], args: tuple, device: torch.device, threads: int = 0
) -> dict:
    """Five measured calls in one invocation; with `threads`, after an invocation whose call
    is followed by that many threads calling at once, each on a stream of its own, and one
    under noise (as the races check calls a candidate in the same worker before)."""
    watch = Watch()
    prepare(device)
    watch.memory_at_load = read_memory(device)
    tensors = tuple(TensorArg(a) for a in args)
    if threads:
        contended = (Call(args=tensors), Call(args=tensors, threads=threads, noise=True))
        run_invocation(function, Invocation(calls=contended), device, watch)
    call = Call(args=tensors, memory=True)
    torch.cuda.memory._record_memory_history(max_entries=100000)
    result = run_invocation(function, Invocation(calls=(call,) * 5), device, watch)
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    held = [c.device_bytes_held for c in result.calls]
    return {
        "error": result.error,
        "held_bytes_after_each_call": held,
        "peak_bytes": [c.device_peak_bytes for c in result.calls],
        "blocks_allocated_now": _holders(snapshot, device.index) if held and held[-1] else [],
    }


_RECORDING_CANDIDATE = """
import os, pickle, torch
torch.cuda.memory._record_memory_history(max_entries=200000)
_calls = [0]
def product(a, b):
    _calls[0] += 1
    name = f"{os.getpid()}-{_calls[0]:04d}.pickle"
    with open(os.path.join(os.environ["HELD_MEMORY_SNAPSHOTS"], name), "wb") as out:
        pickle.dump(torch.cuda.memory._snapshot(), out)
    accumulate = torch.promote_types(a.dtype, torch.float32)
    return (a.to(accumulate) @ b.to(accumulate)).to(a.dtype)
"""


def in_an_audit(checks: str) -> dict[str, object]:
    """The matmul example audited (`memory` only) with a candidate that snapshots the
    allocator at the start of each call; the held finding and the largest live blocks."""
    folder = Path(tempfile.mkdtemp(prefix="held-memory-"))
    (folder / "snapshots").mkdir()
    (folder / "candidate.py").write_text(_RECORDING_CANDIDATE)
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "KERNELAUDIT_SANDBOX": "off"}
    env["HELD_MEMORY_SNAPSHOTS"] = str(folder / "snapshots")
    command = [sys.executable, "-m", "kernelaudit.cli", "check"]
    command += [str(root / "examples/matmul/problem.py"), f"{folder / 'candidate.py'}::product"]
    command += ["--checks", checks, "--device", "cuda", "--json", str(folder / "report.json")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=240)
    report = json.loads((folder / "report.json").read_text()) if done.returncode < 2 else {}
    findings = [
        {"key": f.get("key"), "title": f.get("title")}
        for r in report.get("reports", [report])
        for f in r.get("findings", [])
        if f.get("check") == "memory"
    ]
    calls = sorted((folder / "snapshots").glob("*.pickle"))
    last = {}
    for path in calls[-1:]:
        snapshot = pickle.loads(path.read_bytes())
        last = {"call": path.stem, "blocks": _holders(snapshot, 0)}
    environment = {k: v for k, v in os.environ.items() if "CUBLAS" in k or "CUDA" in k}
    return {
        "exit code": done.returncode,
        "stderr tail": done.stderr[-2000:],
        "memory findings": findings,
        "calls snapshotted": len(calls),
        "largest blocks alive at the last call's start": last,
        "environment": environment,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--audit", action="store_true", help="also the memory check of an audit")
    parser.add_argument("--checks", default="memory", help="the audit's checks (--audit)")
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    results = []
    for name, (function, inputs) in _cases().items():
        seen = {
            "call": name,
            "plain": plain(function, inputs, device),
            "as the worker": as_the_worker(function, inputs, device),
            "as the worker, after threads": as_the_worker(function, inputs, device, threads=4),
        }
        results.append(seen)
        worker, threaded = (
            [b / MiB for b in seen[key]["held_bytes_after_each_call"]]
            for key in ("as the worker", "as the worker, after threads")
        )
        print(
            f"{name}: plainly {seen['plain']['held_bytes'] / MiB:.1f} MiB held; as the worker "
            f"{worker} MiB; after threads {threaded} MiB"
        )
    info = {"torch": torch.__version__, "cuda": torch.version.cuda}
    info["device"] = torch.cuda.get_device_name(device)
    audit = in_an_audit(args.checks) if args.audit else None
    if audit is not None:
        print(json.dumps(audit, indent=1)[:6000])
    args.out.write_text(json.dumps({**info, "calls": results, "audit": audit}, indent=1))


if __name__ == "__main__":
    main()
