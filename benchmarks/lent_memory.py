"""Can the auditor lend device memory to a sandboxed worker, and what does it cost?

The auditor makes a block of device memory (`runner.boundary.lent`), fills it, and hands its
descriptor to a child over a socket; the child (plain, or under the candidate's sandbox) maps it,
checks the auditor's bytes, writes its own with a torch op and with a Triton kernel, and
synchronizes; the auditor then reads the block itself. Per size: the auditor's seconds to make and
map a block, the child's to receive and map it, and whether each side saw the other's writes.

    python benchmarks/lent_memory.py --out lent.json
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernelaudit.runner.auditor.sandbox import confine, isolation
from kernelaudit.runner.boundary import lent

_CHILD = r"""
import socket, sys, time
import torch, triton, triton.language as tl
from kernelaudit.runner.boundary import lent

@triton.jit
def _fill(out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, (i % 251).to(tl.uint8), mask=i < n)

fd, serial = int(sys.argv[1]), int(sys.argv[2])
device = torch.device("cuda", 0)
torch.cuda.set_device(device)
torch.zeros(1, device=device)
channel = socket.socket(fileno=fd)
began = time.perf_counter()
block = lent.receive(channel, device, serial)
mapped = time.perf_counter() - began
half = block.size // 2
seen = bool((block.tensor[:half] == 7).all())
block.tensor[half:].fill_(9)
tail = block.tensor[half:]
_fill[(triton.cdiv(1 << 20, 1024),)](tail, 1 << 20, BLOCK=1024)
torch.cuda.synchronize()
print("ok", round(mapped, 4), seen, flush=True)
"""


def _attempt(confined: bool, nbytes: int, serial: int) -> dict[str, object]:
    device = torch.device("cuda", 0)
    began = time.perf_counter()
    block = lent.Lent.create(device, nbytes, serial)
    made = time.perf_counter() - began
    block.tensor.fill_(7)
    torch.cuda.synchronize()
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    folder = Path(tempfile.mkdtemp(prefix="lent-"))
    script = folder / "child.py"  # Triton compiles kernels defined in a file
    script.write_text(_CHILD)
    command = [sys.executable, str(script), str(theirs.fileno()), str(serial)]
    if confined:
        command = confine(command, readable=[folder])
    lent.send(ours, block)
    started = time.perf_counter()
    # a Triton cache the confined child can write: its /tmp
    env = {**os.environ, "TRITON_CACHE_DIR": "/tmp/triton", "HOME": "/tmp"}
    done = subprocess.run(
        command, capture_output=True, timeout=180, pass_fds=[theirs.fileno()], env=env
    )
    wall = time.perf_counter() - started
    theirs.close()
    ours.close()
    half = block.size // 2
    expected = (torch.arange(1 << 20, device=device) % 251).to(torch.uint8)
    tail = block.tensor[half:]
    seen = bool(torch.equal(tail[: 1 << 20], expected)) and bool((tail[1 << 20 :] == 9).all())
    began = time.perf_counter()
    block.close()
    closed = time.perf_counter() - began
    return {
        "confined": confined,
        "bytes": block.size,
        "auditor_make_and_map_s": round(made, 4),
        "auditor_close_s": round(closed, 4),
        "child": done.stdout.decode().strip()[-300:],
        "child_stderr": done.stderr.decode().strip()[-600:],
        "child_wall_s": round(wall, 2),
        "child_writes_seen_by_auditor": seen,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[64, 1024, 8192])
    args = parser.parse_args()
    device = torch.device("cuda", 0)
    why = lent.unavailable(device)
    rows: list[dict[str, object]] = []
    if not why:
        serial = 0
        for confined in (False, True) if isolation().confined else (False,):
            for mib in args.sizes_mib:
                serial += 1
                try:
                    row = _attempt(confined, mib << 20, serial)
                except Exception as error:
                    row = {"confined": confined, "mib": mib, "error": f"{error!r}"[:400]}
                print(json.dumps(row), flush=True)
                rows.append(row)
    summary = {
        "device": torch.cuda.get_device_name(),
        "torch": torch.__version__,
        "unavailable": why,
        "isolation": isolation().describe(),
        "rows": rows,
    }
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}))
    return 0 if not why and rows and all(r.get("child_writes_seen_by_auditor") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
