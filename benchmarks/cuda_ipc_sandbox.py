"""Can the auditor's device memory be handed to a sandboxed child through CUDA IPC?

The auditor allocates a buffer and an interprocess event on the GPU, passes their IPC handles
to a child started under bubblewrap with one set of namespaces unshared, and the child fills
the buffer and records the event after its kernel. The auditor then reads the buffer itself.
Each variant says whether the child could open the handles and whether the auditor saw its
writes. Prints one JSON line per variant and writes them all to --out.

    python benchmarks/cuda_ipc_sandbox.py --out ipc.json
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import torch

from kernelaudit.runner.auditor.sandbox import confine

_CHILD = r"""
import base64, pickle, sys, time
import torch
storage_handle, event_handle, count = pickle.loads(base64.b64decode(sys.stdin.read()))
torch.cuda.set_device(0)
started = time.perf_counter()
try:
    storage = torch.UntypedStorage._new_shared_cuda(*storage_handle)
    view = torch.empty(0, dtype=torch.float32, device="cuda").set_(storage, 0, (count,), (1,))
    view.copy_(torch.arange(count, dtype=torch.float32, device="cuda") * 2.0 + 1.0)
    event = torch.cuda.Event.from_ipc_handle(torch.device("cuda", 0), event_handle)
    event.record()
    torch.cuda.synchronize()
    print("opened", round(time.perf_counter() - started, 4))
except Exception as error:
    print("failed", type(error).__name__, str(error)[:300])
"""

_SHM_BEFORE: set[str] = set()

_DROP = "import os; os.setgroups([]); os.setgid(65534); os.setuid(65534)\n"

_UNSHARED = {
    "all": ["--unshare-all"],
    "ipc-shared": [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ],
    "ipc-and-pid-shared": [
        "--unshare-user",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ],
    "user-same-uid": [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
    ],
    "user-same-uid-private-shm": [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
    ],
    "user-same-uid-bound-shm": [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
    ],
    "no-user-nobody": ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"],
    "no-user-dropcaps": [
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--cap-drop",
        "ALL",
    ],
    "no-user": ["--unshare-pid", "--unshare-ipc", "--unshare-net", "--unshare-uts"],
    "all-host-shm": ["--unshare-all"],
    "pid-shared": [
        "--unshare-user",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
    ],
}


def _attempt(variant: str, count: int) -> dict[str, object]:
    buffer = torch.zeros(count, dtype=torch.float32, device="cuda")
    event = torch.cuda.Event(interprocess=True, enable_timing=False)
    storage_handle = buffer.untyped_storage()._share_cuda_()
    payload = base64.b64encode(pickle.dumps((storage_handle, event.ipc_handle(), count)))
    command = [sys.executable, "-c", _CHILD]
    if variant != "none":
        command = confine(command)
        at = command.index("--unshare-all")
        command[at : at + 1] = _UNSHARED[variant]
        if variant.startswith(("all-host-shm", "no-user")) or variant == "user-same-uid":
            shm = command.index("/dev/shm")
            command[shm - 1 : shm + 1] = ["--bind", "/dev/shm", "/dev/shm"]
        if variant.startswith(("no-user", "user-same")):  # no uid of its own
            at = command.index("--uid")
            del command[at : at + 4]
    started = time.perf_counter()
    if variant == "user-same-uid-bound-shm":  # only the files the auditor's sharing made
        at = command.index("--chdir")
        for name in sorted(set(os.listdir("/dev/shm")) - _SHM_BEFORE):
            command[at:at] = ["--bind", f"/dev/shm/{name}", f"/dev/shm/{name}"]
    if variant == "no-user-nobody":  # the child gives up the auditor's uid itself
        at = command.index("-c")
        command[at + 1] = _DROP + command[at + 1]
    done = subprocess.run(command, input=payload, capture_output=True, timeout=120)
    wall = time.perf_counter() - started
    torch.cuda.current_stream().wait_event(event)
    expected = torch.arange(count, dtype=torch.float32, device="cuda") * 2.0 + 1.0
    seen = bool(torch.equal(buffer, expected))
    return {
        "variant": variant,
        "child": done.stdout.decode().strip()[-400:],
        "stderr": done.stderr.decode().strip()[-400:],
        "writes_seen_by_auditor": seen,
        "child_wall_s": round(wall, 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--elements", type=int, default=1 << 20)
    parser.add_argument("--variants", nargs="+", default=["none", *_UNSHARED])
    args = parser.parse_args()
    _SHM_BEFORE.update(os.listdir("/dev/shm"))
    torch.cuda.init()
    first = torch.zeros(16, device="cuda")
    first.untyped_storage()._share_cuda_()
    print("made in /dev/shm by sharing:", sorted(set(os.listdir("/dev/shm")) - _SHM_BEFORE))
    rows = []
    for variant in args.variants:
        try:
            row = _attempt(variant, args.elements)
        except Exception as error:  # one variant's failure says something too
            row = {"variant": variant, "error": f"{type(error).__name__}: {error}"[:400]}
        print(json.dumps(row), flush=True)
        rows.append(row)
    args.out.write_text(
        json.dumps(
            {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
