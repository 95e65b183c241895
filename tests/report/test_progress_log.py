"""What a log (no terminal: CI, a corpus slot, a pipe) shows while an audit runs."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from kernelaudit.engine.progress import ProgressEvent
from kernelaudit.report import terminal


def logged(events: list[ProgressEvent]) -> list[str]:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=200)
    with terminal.progress_bar(console) as bar:
        for event in events:
            bar("scale / doubled", event)
    return out.getvalue().splitlines()


EVENTS = [
    ProgressEvent("phase", 0, 3, "planning", 1.25),
    ProgressEvent("probe", 1, 3, "numerics: workload 0"),
    ProgressEvent("probe", 2, 3, "numerics: boundary n=1"),
    ProgressEvent("check", 2, 3, "numerics", 4.5),
]


def test_phases_and_checks_are_a_line_each_with_their_seconds() -> None:
    lines = logged(EVENTS)
    assert len(lines) == 2
    assert lines[0].endswith("scale / doubled  phase planning: 1.2 s (3 probes)")
    assert lines[1].endswith("scale / doubled  check numerics: 4.5 s (3 probes)")
    assert all(line.startswith("[") and " s] " in line for line in lines)


def test_a_long_stretch_of_probes_is_not_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    # as when each probe of a check takes longer than the quiet spell a log allows
    monkeypatch.setattr(terminal, "QUIET_S", 0.0)
    lines = logged(EVENTS)
    assert [line.split("]", 1)[1].strip() for line in lines] == [
        "scale / doubled  phase planning: 1.2 s (3 probes)",
        "scale / doubled  probe 1 of 3 judged: numerics: workload 0",
        "scale / doubled  probe 2 of 3 judged: numerics: boundary n=1",
        "scale / doubled  check numerics: 4.5 s (3 probes)",
    ]
