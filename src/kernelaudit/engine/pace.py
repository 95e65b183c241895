"""How fast this machine audits, measured against the cost model's estimates
(`engine.budget.expected_seconds`): kept on disk after each run that announced an estimate, so
that the next run states its duration at this machine's own pace rather than at the pace of the
hosts the cost model was fitted on (which can be twice as slow or as fast).

Before a CPU's first run, its pace is guessed from a short measurement of its speed
(`measured_pace`): a CPU audit is the Triton interpreter's Python and NumPy and torch's small
operations, one core a lane, so a fixed piece of such work, timed here and on the host the
guess is anchored to, says how much faster or slower this one is. A GPU's first estimate stays
at the fitted pace (its audits wait on the device as much as on the host).

An estimate only: nothing here weighs on a verdict, on what an audit plans or on its budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from kernelaudit.formats.cache import cache_root, write_if_changed

PACE_FORMAT = 3
"""3: the estimates count the training check's steps (`training.estimate`; 2 did not, so a GPU's
paces were about 2.5 times what they are against the estimates now). A pace is the wall time of
a run's audits against the estimate announced for them (1 summed the audits' seconds, which
lanes that end unevenly left short of the wall time)."""
KEPT = 5
"""The paces of this many recent runs are kept per machine and device; their median is used."""

ANCHOR_SECONDS = 0.021
"""The seconds `_speed_work` takes (the least of `_SPEED_REPEATS`) on the host the CPU's
first-run guess is anchored to: 21-35 ms there from one second to the next, 21 ms the least of
five in its faster spells, when its pace was measured (a shared machine's speed moves about as
much as that, the demo's with it)."""
ANCHOR_PACE = 0.46
"""That host's pace: its first demo's wall time against the estimate announced for it, 181 s
against 394 s (docs/benchmarks.md, "The demo's first estimate on a CPU")."""
_SPEED_REPEATS = 5


def pace_path() -> Path:
    """pace.json in the cache (`formats.cache.cache_root`)."""
    return cache_root() / "pace.json"


def _machine(device: str) -> str:
    """The host, its core count and the device's kind: a pace holds for these together."""
    return f"{platform.node()}|{os.cpu_count()}|{device.partition(':')[0]}"


def _read() -> dict[str, list[float]]:
    try:
        data = json.loads(pace_path().read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("format") != PACE_FORMAT:
        return {}
    paces = data.get("paces")
    if not isinstance(paces, dict):
        return {}
    return {
        str(key): [float(p) for p in value if isinstance(p, int | float) and p > 0]
        for key, value in paces.items()
        if isinstance(value, list)
    }


def recorded_pace(device: str) -> float | None:
    """This machine's seconds per estimated second on `device` over its recent runs (the
    median), or None before its first run."""
    paces = _read().get(_machine(device))
    return statistics.median(paces) if paces else None


def record_pace(device: str, estimated_s: float, actual_s: float) -> None:
    """Keep one run's pace: the `actual_s` of wall time its audits took against the
    `estimated_s` announced for them. A cache that cannot be written only costs the next
    estimate its calibration."""
    if not (estimated_s > 0 and actual_s > 0):
        return
    paces = _read()
    key = _machine(device)
    paces[key] = [*paces.get(key, []), actual_s / estimated_s][-KEPT:]
    path = pace_path()
    with contextlib.suppress(OSError, ValueError):  # unwritable, or not text
        path.parent.mkdir(parents=True, exist_ok=True)
        write_if_changed(path, json.dumps({"format": PACE_FORMAT, "paces": paces}, indent=1))


def at_this_pace(estimated_s: float, device: str) -> tuple[float, str]:
    """`estimated_s` at this machine's recorded pace, else (a CPU's first run) at the pace its
    measured speed suggests, and how it was arrived at, in words that follow "about N
    minutes"."""
    pace = recorded_pace(device)
    if pace is not None:
        return estimated_s * pace, "on this machine, at the pace of its last runs"
    guessed = measured_pace(device)
    if guessed is not None:
        return estimated_s * guessed, (
            "on this machine, at the pace a short measurement of its speed suggests (its own "
            "pace is kept for the next run)"
        )
    return estimated_s, (
        "at the pace of the hosts the estimate was fitted on (this machine's own shows as "
        "the first candidates finish, and is kept for the next run)"
    )


def measured_pace(device: str) -> float | None:
    """A CPU's pace guessed from how long `_speed_work` takes here against the anchor host
    (`ANCHOR_SECONDS`, `ANCHOR_PACE`); None on a GPU, or where the work cannot be timed."""
    if device.partition(":")[0] != "cpu":
        return None
    try:
        # the least: a run the first touch of NumPy's and torch's paths, or a moment's other
        # work, made slower says nothing of the machine's speed
        seconds = min(_timed(_speed_work) for _ in range(_SPEED_REPEATS))
    except Exception:  # an estimate only: a machine where the work fails gets the fitted pace
        return None
    return ANCHOR_PACE * seconds / ANCHOR_SECONDS if seconds > 0 else None


def _timed(work: Callable[[], object]) -> float:
    began = time.perf_counter()
    work()
    return time.perf_counter() - began


def _speed_work() -> None:
    """About 25 ms on the anchor host of what a CPU audit spends its time on, one core: small
    NumPy operations driven from Python, as Triton's interpreter runs a program's blocks, and
    torch's small operations, as a reference and the training check's tiny model run."""
    block = np.linspace(-1.0, 1.0, 256, dtype=np.float32)
    total = 0.0
    for step in range(3000):
        moved = block * np.float32(1.0001) + np.float32(step)
        kept = np.where(moved > step, moved, np.float32(0.0))
        handles = {"data": kept, "step": step}
        total += float(handles["data"][::64].sum())
    values = torch.linspace(-1.0, 1.0, 256)
    for _ in range(1500):
        values = torch.tanh(values * 1.0001).add_(1e-3)
