"""How fast this machine audits, measured against the cost model's estimates
(`engine.budget.expected_seconds`): kept on disk after each run that announced an estimate, so
that the next run states its duration at this machine's own pace rather than at the pace of the
hosts the cost model was fitted on (which can be twice as slow or as fast).

An estimate only: nothing here weighs on a verdict, on what an audit plans or on its budget.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import statistics
from pathlib import Path

from kernelaudit.formats.cache import cache_root, write_if_changed

PACE_FORMAT = 3
"""3: the estimates count the training check's steps (`training.estimate`; 2 did not, so a GPU's
paces were about 2.5 times what they are against the estimates now). A pace is the wall time of
a run's audits against the estimate announced for them (1 summed the audits' seconds, which
lanes that end unevenly left short of the wall time)."""
KEPT = 5
"""The paces of this many recent runs are kept per machine and device; their median is used."""


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
    """`estimated_s` at this machine's recorded pace, and how it was arrived at, in words that
    follow "about N minutes"."""
    pace = recorded_pace(device)
    if pace is None:
        return estimated_s, (
            "at the pace of the hosts the estimate was fitted on (this machine's own shows as "
            "the first candidates finish, and is kept for the next run)"
        )
    return estimated_s * pace, "on this machine, at the pace of its last runs"
