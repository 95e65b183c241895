"""The device's peak rates, measured and kept: memory bandwidth from a large device-to-device
copy and compute throughput from a square matmul per dtype, both timed with `time_calls`, each
measurement's steadiness kept with it (`Roofline.spread`); measured once per process and kept
on disk per device model and versions, sealed so that no one but the auditor can change it
(`measure_roofline`). `timing.roofline` places a time against them."""

from __future__ import annotations

import json
import math
import os
import platform
import re
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from kernelaudit.report.seal import check, seal
from kernelaudit.timing.measure import Timing, as_device, l2_bytes, time_calls
from kernelaudit.timing.roofline import STEADY_SPREAD, Roofline

CUDA_COPY_BYTES = 256 * 2**20
"""Least size of the bandwidth copy on CUDA; the copy is also at least 8x the L2 so the cache
cannot serve it. At H100 bandwidth this is a few hundred microseconds per copy."""

CUDA_MATMUL_SIZES = {
    "float16": 8192,
    "bfloat16": 8192,
    "tf32": 8192,
    "float32": 4096,
    "float64": 4096,
}
"""Square matmul sizes that fill every SM of a current data-centre GPU with full tiles for
many waves; float32 without TF32 and float64 are slower per FLOP, so a smaller size already
takes milliseconds."""

CPU_COPY_BYTES = 32 * 2**20
CPU_MATMUL_SIZES = {"float32": 512, "float64": 512, "bfloat16": 512, "float16": 128}
"""Small enough that the whole CPU measurement takes well under a second (float16 matmul has
no fast path on most CPUs), large enough to leave the caches and use every thread."""

GPU_MEASURES = 3
"""How many times a GPU's roofline is measured while it comes out unsteady."""

CACHE_FORMAT = "kernelaudit-roofline/3"

UNKNOWN_CPU_CACHE_BYTES = 1 << 30
"""Assumed size of a CPU's largest cache when the system does not say: larger than any cache
shipped, so an unknown cache never makes an honest time look impossible."""


_MEASURED: dict[tuple[str, ...], Roofline] = {}


def measure_roofline(
    device: torch.device | str, *, refresh: bool = False, disk_cache: bool = True
) -> Roofline:
    """The roofline of `device`, measured once per process and kept on disk per device model
    and torch version (see `cache_path`), sealed with the auditor's key (`report.seal`): a file
    whose seal does not hold is measured over. refresh=True measures anew and overwrites both
    caches; disk_cache=False neither reads nor writes the file. Takes about a second on an
    H100."""
    device = as_device(device)
    name = device_name(device)
    key = (name, torch.__version__, torch.version.cuda or "no-cuda")
    if not refresh and key in _MEASURED:
        return _MEASURED[key]
    path = cache_path(key)
    roofline = None if refresh or not disk_cache else _load(path, key)
    if roofline is None:
        roofline = _steadiest(device, name)
        # a GPU's measured while something kept the device busy (a candidate's process, say)
        # is used in this process only: the next measures again
        unsteady = device.type == "cuda" and roofline.unsteady(roofline.spread)
        if disk_cache and not unsteady:
            _store(path, key, roofline)
    _MEASURED[key] = roofline
    return roofline


def _steadiest(device: torch.device, name: str) -> Roofline:
    """The roofline measured, and on a GPU measured again while it is unsteady
    (`STEADY_SPREAD`), up to `GPU_MEASURES` times: the one whose widest spread is least. (A
    CPU's, measured on shared cores and never a floor to fail on, is measured once.)"""
    measured = [_measure(device, name)]
    while (
        device.type == "cuda"
        and measured[-1].unsteady(measured[-1].spread)
        and len(measured) < GPU_MEASURES
    ):
        measured.append(_measure(device, name))
    return min(measured, key=lambda r: max(r.spread.values(), default=1.0))


def device_name(device: torch.device) -> str:
    """The device model, as rooflines are keyed and labelled."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "cpu":
        processor = platform.processor() or platform.machine() or "unknown"
        return f"CPU {processor}, {torch.get_num_threads()} threads"
    return device.type


def cache_path(key: tuple[str, ...]) -> Path:
    """$XDG_CACHE_HOME/kernelaudit (or ~/.cache/kernelaudit) / roofline-<device>-<versions>.json"""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    slug = re.sub(r"[^a-z0-9.]+", "-", "-".join(key).lower()).strip("-")
    return Path(base) / "kernelaudit" / f"roofline-{slug}.json"


def _measure(device: torch.device, name: str) -> Roofline:
    on_cuda = device.type == "cuda"
    if on_cuda:
        copy_bytes = max(CUDA_COPY_BYTES, 8 * l2_bytes(device))
        copy_bytes = min(copy_bytes, torch.cuda.mem_get_info(device)[0] // 8) // 2**20 * 2**20
        sizes = dict(CUDA_MATMUL_SIZES)
        if torch.cuda.get_device_capability(device) < (8, 0):
            del sizes["tf32"]
        budget = {"warmup": 2, "min_repetitions": 5, "max_repetitions": 50, "target_seconds": 0.05}
    else:
        copy_bytes = CPU_COPY_BYTES
        sizes = dict(CPU_MATMUL_SIZES)
        budget = {"warmup": 1, "min_repetitions": 3, "max_repetitions": 20, "target_seconds": 0.02}
    try:
        copied = _copy_timing(copy_bytes, device, budget)
        bandwidth = 2 * copy_bytes / _fastest(copied)
        spread = {"bandwidth": _spread(copied)}
        rates = {}
        for key, n in sizes.items():
            multiplied = _matmul_timing(key, n, device, budget)
            rates[key] = 2 * n**3 / _fastest(multiplied)
            spread[key] = _spread(multiplied)
    finally:
        if on_cuda:
            torch.cuda.empty_cache()
    listed = ", ".join(f"n={n} {key}" for key, n in sizes.items())
    clock = "CUDA events, L2 flushed, device-wide sync" if on_cuda else "host clock"
    method = (
        f"bandwidth: fastest time of a {copy_bytes / 2**20:.0f} MiB copy within the device, "
        f"counting bytes read and written; compute: fastest time of a square torch.mm per dtype "
        f"({listed}; float32 with TF32 off), at 2n^3 FLOP each; timed with {clock}"
        + ("" if on_cuda else "; a CPU measurement with small sizes, a rough guide only")
        + "; the fastest time is the peak: a busy host only ever slows a measurement down; "
        f"each measurement's median over its fastest time is kept, and a floor resting on one "
        f"past {STEADY_SPREAD:g}x fails no kernel"
    )
    return Roofline(
        device=name,
        bandwidth_bytes_per_s=bandwidth,
        flops_per_s=rates,
        method=method,
        warm_cache_bytes=0 if on_cuda else cpu_cache_bytes(),
        spread=spread,
    )


def cpu_cache_bytes() -> int:
    """The largest CPU cache the system reports (the last level of cpu0's caches), or
    UNKNOWN_CPU_CACHE_BYTES when it reports none."""
    sizes = []
    for entry in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        match = re.fullmatch(r"(\d+)([KMG]?)", entry.read_text().strip())
        if match:
            scale = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}[match.group(2)]
            sizes.append(int(match.group(1)) * scale)
    return max(sizes, default=UNKNOWN_CPU_CACHE_BYTES)


def _copy_timing(copy_bytes: int, device: torch.device, budget: dict[str, Any]) -> Timing:
    words = copy_bytes // 4
    source = torch.randint(-(2**31), 2**31 - 1, (words,), dtype=torch.int32, device=device)
    target = torch.empty_like(source)
    return time_calls(lambda: target.copy_(source), device, **budget)


def _fastest(timing: Timing) -> float:
    """The peak's time: the fastest sample; where the protocol's cost subtracted from the
    samples left them at zero (a cost measured while other work shared the device), the
    fastest sample with that cost left in, never a time of zero."""
    fastest = min(timing.samples_s)
    if fastest > 0.0:
        return fastest
    return min(sample + timing.overhead_s for sample in timing.samples_s) or math.ulp(1.0)


def _spread(timing: Timing) -> float:
    """The median sample over the fastest (`_fastest`, the protocol's cost left in where it
    left the samples at zero): 1.0 for a device that ran every sample alike."""
    fastest = _fastest(timing)
    samples = (
        timing.samples_s
        if min(timing.samples_s) > 0.0
        else [s + timing.overhead_s for s in timing.samples_s]
    )
    ordered = sorted(samples)
    return max(1.0, ordered[len(ordered) // 2] / fastest)


def _matmul_timing(key: str, n: int, device: torch.device, budget: dict[str, Any]) -> Timing:
    dtype = torch.float32 if key == "tf32" else getattr(torch, key)
    a = torch.randn(n, n, dtype=dtype, device=device)
    b = torch.randn(n, n, dtype=dtype, device=device)
    out = torch.empty(n, n, dtype=dtype, device=device)
    before = torch.get_float32_matmul_precision()
    # the flag is process-wide: restored even on failure, as the audit depends on it
    torch.set_float32_matmul_precision("high" if key == "tf32" else "highest")
    try:
        return time_calls(lambda: torch.mm(a, b, out=out), device, **budget)
    finally:
        torch.set_float32_matmul_precision(before)


def _load(path: Path, key: tuple[str, ...]) -> Roofline | None:
    try:
        data = json.loads(path.read_text())
        if data.get("format") != CACHE_FORMAT or tuple(data.get("key", ())) != key:
            return None
        sealed = data.pop("seal", None)
        if check(data, sealed) != "intact":
            return None  # written or changed by someone without the auditor's key
        roofline = Roofline.from_json(data["roofline"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    rates = [roofline.bandwidth_bytes_per_s, *roofline.flops_per_s.values()]
    if not all(math.isfinite(r) and r > 0 for r in rates):
        return None
    method = f"{roofline.method}; read from {path}, measured {data.get('measured', 'earlier')}"
    return replace(roofline, method=method)


def _store(path: Path, key: tuple[str, ...], roofline: Roofline) -> None:
    document = {
        "format": CACHE_FORMAT,
        "key": list(key),
        "measured": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "roofline": roofline.to_json(),
    }
    document["seal"] = seal(dict(document))
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    # a cache that cannot be written only costs a measurement next time
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_text(json.dumps(document, indent=2))
        os.replace(partial, path)
    except OSError:
        partial.unlink(missing_ok=True)
