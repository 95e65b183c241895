"""What torch's allocator still holds after common library calls, read the way the `memory`
check reads a call, and who allocated each block still held (the allocator's recorded
history): first each call made plainly (`runner.boundary.memory.read_memory` before and after), then
the same calls as the worker makes them (`runner.worker.call.run_invocation`, five measured calls,
in this process), where the check reads what a candidate keeps. With --audit, the `memory`
check of a real audit of the matmul example whose candidate is torch's own product, the
candidate recording the allocator's history from its import on and writing a snapshot at the
start of every call (its worker unsandboxed, so it can write them): the blocks alive then, and
who allocated them; with --sol, the same for a SOL-ExecBench problem's own reference.

    python benchmarks/held_memory.py --out held-memory.json [--audit [--sol PROBLEM_FOLDER]]
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

from kernelaudit.runner.boundary.guard import prepare
from kernelaudit.runner.boundary.memory import read_memory
from kernelaudit.runner.boundary.messages import Call, Invocation, TensorArg
from kernelaudit.runner.worker.call import run_invocation
from kernelaudit.runner.worker.watch import Watch

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


_RECORDING_SOLUTION = """

import os as _os, pickle as _pickle
torch.cuda.memory._record_memory_history(max_entries=20000)
_OUTPUTS = {outputs!r}


def recorded_run(*args):
    # one snapshot a process, the latest call's: a whole audit makes hundreds of calls
    name = f"{{_os.getpid()}}-latest.pickle"
    with open(_os.path.join(_os.environ["HELD_MEMORY_SNAPSHOTS"], name), "wb") as out:
        _pickle.dump(torch.cuda.memory._snapshot(), out)
    returned = run(*args)
    if isinstance(returned, dict):
        return tuple(returned[name] for name in _OUTPUTS)
    return returned
"""


def _sol_candidate(sol: Path, folder: Path) -> tuple[str, str]:
    """A SOL-ExecBench problem and a solution whose candidate is its own reference, recording
    the allocator's history from its import on and snapshotting at the start of every call."""
    definition = json.loads((sol / "definition.json").read_text())
    source = "import torch\n" + definition["reference"]
    source += _RECORDING_SOLUTION.format(outputs=tuple(definition["outputs"]))
    spec = {"languages": ["pytorch"], "target_hardware": ["H100"]}
    spec |= {"entry_point": "reference.py::recorded_run", "destination_passing_style": False}
    solution = {"name": "recorded", "definition": definition["name"], "spec": spec}
    solution["sources"] = [{"path": "reference.py", "content": source}]
    (folder / "solution.json").write_text(json.dumps(solution))
    return str(sol), str(folder / "solution.json")


def in_an_audit(checks: str, sol: Path | None = None) -> dict[str, object]:
    """The matmul example (or the SOL-ExecBench problem `sol`, its own reference the
    candidate) audited with `checks`, its candidate snapshotting the allocator at the start of
    each call; the memory findings and the largest blocks alive at the last call."""
    folder = Path(tempfile.mkdtemp(prefix="held-memory-"))
    (folder / "snapshots").mkdir()
    root = Path(__file__).resolve().parent.parent
    if sol is None:
        (folder / "candidate.py").write_text(_RECORDING_CANDIDATE)
        problem = str(root / "examples/matmul/problem.py")
        candidate = f"{folder / 'candidate.py'}::product"
    else:
        problem, candidate = _sol_candidate(sol, folder)
    env = {**os.environ, "KERNELAUDIT_SANDBOX": "off"}
    env["HELD_MEMORY_SNAPSHOTS"] = str(folder / "snapshots")
    command = [sys.executable, "-m", "kernelaudit.cli", "check", problem, candidate]
    command += ["--checks", checks] if checks else []  # "": every check
    command += ["--device", "cuda", "--json", str(folder / "report.json")]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=480)
    report = json.loads((folder / "report.json").read_text()) if done.returncode < 2 else {}
    findings = [
        {"key": f.get("key"), "title": f.get("title")}
        for r in report.get("reports", [report])
        for f in r.get("findings", [])
        if f.get("check") == "memory"
    ]
    # the matmul example's candidate writes a snapshot a call, the SOL one a snapshot a process
    snapshots = sorted((folder / "snapshots").glob("*.pickle"))
    by_process: dict[str, Path] = {}
    for path in snapshots:
        by_process[path.stem.split("-")[0]] = path  # the latest of each process
    alive = [
        {"snapshot": path.stem, "blocks": _holders(pickle.loads(path.read_bytes()), 0)}
        for path in by_process.values()
    ]
    environment = {k: v for k, v in os.environ.items() if "CUBLAS" in k or "CUDA" in k}
    return {
        "exit code": done.returncode,
        "stderr tail": done.stderr[-2000:],
        "memory findings": findings,
        "snapshots": len(snapshots),
        "largest blocks alive at each process's last call's start": alive,
        "environment": environment,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--audit", action="store_true", help="also the memory check of an audit")
    parser.add_argument(
        "--checks", default="memory", help="the audit's checks (--audit; '' for all)"
    )
    parser.add_argument(
        "--sol", type=Path, help="audit this SOL-ExecBench problem's reference instead (--audit)"
    )
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
    audit = in_an_audit(args.checks, args.sol) if args.audit else None
    if audit is not None:
        print(json.dumps(audit, indent=1)[:6000])
    args.out.write_text(json.dumps({**info, "calls": results, "audit": audit}, indent=1))


if __name__ == "__main__":
    main()
