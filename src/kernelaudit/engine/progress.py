"""What an audit tells whoever watches it while it runs: each probe as it is judged, and each
phase and check as it finishes, with its seconds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class ProgressEvent:
    """One step of an audit.

    kind: "probe" (a probe was run and judged), "check" (a check's last probe was judged, or
        its concluding experiment finished) or "phase" (planning, probing, shrinking, ...).
    done, total: probes judged so far, and planned in all (follow-ups included as they come).
    what: the probe's check and case, or the check's or phase's name.
    seconds: for "check" and "phase", the seconds it took.
    """

    kind: Literal["probe", "check", "phase"]
    done: int
    total: int
    what: str
    seconds: float = 0.0


Progress = Callable[[ProgressEvent], None]
