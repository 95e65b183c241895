"""Where one audit's time goes: the auditor under cProfile, every Python process it starts
(the worker, the sanitizer's children, the training and interpreter children) under cProfile
too, a timeline of the audit's probes, checks and phases as they end, and wall-clock
stopwatches on the auditor's costly steps (cProfile's figures are wrong wherever torch's own
profiler runs, which replaces the interpreter's profiling hook).

    python benchmarks/profile_audit.py PROBLEM CANDIDATE --profile quick --out profile-dir
    python benchmarks/profile_audit.py --sol path/to/solexecbench/L1/016_... --out profile-dir

--sol audits a SOL-ExecBench problem with its own reference as the candidate. --stop-after
SECONDS interrupts an audit that runs longer and writes what was seen until then. The folder gets
timeline.json (every progress event with the seconds since the start), spans.json (every
stopwatch's call: what, thread, from and to), report.json, one <name>-<pid>.pstats per
profiled process and summary.txt: the stopwatches, each probe's seconds on the auditor's main
thread by part (making the case, sending, the worker's run, judging...), and the slowest
functions of each process. --stopwatches-only leaves cProfile out, so the audit runs at its
own speed and only the stopwatches and the timeline are kept.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_CHILD_PROFILER = """
import atexit, cProfile, os, sys
_folder = os.environ.get("KERNELAUDIT_BENCH_PROFILE_DIR")
if _folder:
    _profiler = cProfile.Profile()
    _profiler.enable()

    def _dump() -> None:
        _profiler.disable()
        name = os.path.basename(sys.argv[0]) or "python"
        if name in ("-m", "-c"):
            name = "child"
        _profiler.dump_stats(os.path.join(_folder, f"{name}-{os.getpid()}.pstats"))

    atexit.register(_dump)
"""


def _profile_children(folder: Path) -> None:
    """Every Python process started from here on profiles itself into `folder` (through a
    sitecustomize on its path) and writes its stats when it exits."""
    hook = Path(tempfile.mkdtemp(prefix="kernelaudit-profile-hook-"))
    (hook / "sitecustomize.py").write_text(_CHILD_PROFILER)
    os.environ["KERNELAUDIT_BENCH_PROFILE_DIR"] = str(folder)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p
    )
    # a worker writes its stats as it exits: let it end by itself before it is killed
    from kernelaudit.runner.auditor.process import Worker

    Worker.close_grace_s = 2.0


_WATCHED = (
    ("kernelaudit.engine.executor", "reference_timing"),
    ("kernelaudit.engine.executor", "reference_kernels"),
    ("kernelaudit.engine.executor", "reference_memory"),
    ("kernelaudit.engine.executor", "expected"),
    ("kernelaudit.engine.executor", "materialize"),
    ("kernelaudit.engine.measure", "derived_flops"),
    ("kernelaudit.engine.measure", "measure_roofline"),
    ("kernelaudit.engine.measure", "time_calls"),
    ("kernelaudit.engine.measure", "profile_kernels"),
    ("kernelaudit.runner.auditor.process.Worker", "run"),
    ("kernelaudit.runner.auditor.process.Worker", "start"),
    ("kernelaudit.runner.auditor.process", "observe"),
    ("kernelaudit.runner.boundary.lent.Lender", "lend"),
    ("kernelaudit.engine.executor.Executor", "prepare"),
    ("kernelaudit.engine.executor.Executor", "observe"),
    ("kernelaudit.runner.auditor.process.Worker", "_send"),
    ("kernelaudit.runner.auditor.process.Worker", "_receive"),
    ("kernelaudit.runner.auditor.observed", "_input_after"),
    ("kernelaudit.runner.auditor.observed", "_observed"),
    ("kernelaudit.device_copies.DeviceCopies", "copied"),
    ("kernelaudit.oracle.resident.Resident", "get"),
    ("kernelaudit.engine.audit", "plan_all"),  # where the audit looks it up
    ("kernelaudit.engine.executor.Executor", "_truth"),
    ("kernelaudit.engine.executor.Executor", "_measure"),
    ("kernelaudit.engine.executor.Executor", "_clocked"),
    ("kernelaudit.engine.executor.Executor", "_settle_ahead"),
    ("kernelaudit.engine.executor.Executor", "_wait_ahead"),
)
"""Functions timed with a wall-clock stopwatch (`module.function` or `module.Class`, name), each
where its callers look it up; every check's `judge` is timed besides, per check."""


SPANS: list[tuple[str, str, float, float]] = []
"""Every stopwatch's call: (label, thread, began, ended), on `time.perf_counter`'s clock."""


def _stopwatch(
    original: Callable[..., Any], label: str, seen: dict[str, list[float]]
) -> Callable[..., Any]:
    """`original`, its every call timed into `seen[label]` and `SPANS`."""
    seen[label] = []

    def timed(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            ended = time.perf_counter()
            seen[label].append(ended - began)
            SPANS.append((label, threading.current_thread().name, began, ended))

    return timed


def _stopwatches() -> dict[str, list[float]]:
    """Wrap each of `_WATCHED`, and each check's `judge` (by the check's name), in a
    wall-clock stopwatch; returns the seconds of every call."""
    import importlib

    from kernelaudit.checks import REGISTRY

    seen: dict[str, list[float]] = {}
    for where, name in _WATCHED:
        module_name, _, last = where.rpartition(".")
        if last[:1].isupper():  # a class: module.Class
            owner = getattr(importlib.import_module(module_name), last)
        else:
            owner = importlib.import_module(where)
        label = f"{where.rsplit('.', 1)[-1]}.{name}"
        setattr(owner, name, _stopwatch(getattr(owner, name), label, seen))
    for check in REGISTRY:
        if "judge" in vars(check):
            check.judge = _stopwatch(vars(check)["judge"], f"judge {check.name}", seen)  # type: ignore[method-assign]
    return seen


_ANATOMY = (
    ("prepare", "Executor.prepare"),
    ("truth", "Executor._truth"),
    ("draws", "executor.materialize"),
    ("send", "Worker._send"),
    ("worker", "Worker._receive"),
    ("read", "observed._observed"),
    ("measure", "Executor._measure"),
    ("clocked", "Executor._clocked"),
)


def _anatomy(probes: list[dict[str, object]], spans: list[dict[str, object]]) -> list[str]:
    """Each probe's seconds on the auditor's main thread, from the end of the probe before
    it to its own: the stopwatches that ended in between, summed (every check's `judge`
    together)."""
    header = " ".join(f"{name:>7}" for name, _ in (("probe", ""), *_ANATOMY, ("judge", "")))
    lines = ["each probe on the main thread, in seconds:", f"{header}  what"]
    last = 0.0
    for event in probes:
        end = float(event["at_s"])  # type: ignore[arg-type]
        summed: dict[str, float] = {}
        for span in spans:
            ended = float(span["to_s"])  # type: ignore[arg-type]
            if span["thread"] == "MainThread" and last < ended <= end:
                label = str(span["what"])
                label = "judge" if label.startswith("judge ") else label
                summed[label] = summed.get(label, 0.0) + ended - float(span["from_s"])  # type: ignore[arg-type]
        figures = [end - last, *(summed.get(label, 0.0) for _, label in _ANATOMY)]
        figures.append(summed.get("judge", 0.0))
        lines.append(" ".join(f"{f:7.2f}" for f in figures) + f"  {event['what']}")
        last = end
    return lines


def _top(path: Path, limit: int) -> str:
    text = io.StringIO()
    stats = pstats.Stats(str(path), stream=text)
    stats.sort_stats("cumulative").print_stats(limit)
    return text.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", nargs="?")
    parser.add_argument("candidate", nargs="?")
    parser.add_argument("--sol", type=Path, help="a SOL-ExecBench problem folder")
    parser.add_argument("--profile", default="quick")
    parser.add_argument("--device", default=None)
    parser.add_argument("--checks", nargs="+", default=None)
    parser.add_argument("--top", type=int, default=45, help="functions listed per process")
    parser.add_argument(
        "--stop-after",
        type=float,
        default=None,
        help="interrupt the audit after this many seconds and summarise what it did until then",
    )
    parser.add_argument(
        "--stopwatches-only",
        action="store_true",
        help="no cProfile anywhere: the stopwatches and the timeline alone, at full speed",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()

    args.out.mkdir(parents=True, exist_ok=True)
    children = args.out / "children"
    children.mkdir(exist_ok=True)
    if not args.stopwatches_only:
        _profile_children(children)
    if args.sol is not None:
        sys.path.insert(0, str(Path(__file__).parent))
        from solexecbench_scale import write_shim

        problem = str(args.sol)
        candidate = str(write_shim(args.sol, args.out / "shim"))
    elif args.problem and args.candidate:
        problem, candidate = args.problem, args.candidate
    else:
        parser.error("give PROBLEM CANDIDATE, or --sol FOLDER")

    from kernelaudit.engine.audit import audit
    from kernelaudit.engine.progress import ProgressEvent

    began = time.perf_counter()
    timeline: list[dict[str, object]] = []

    def seen(event: ProgressEvent) -> None:
        timeline.append(
            {
                "at_s": round(time.perf_counter() - began, 3),
                "kind": event.kind,
                "what": event.what,
                "seconds": round(event.seconds, 3),
            }
        )

    watches = _stopwatches()
    if args.stop_after is not None:
        import _thread

        alarm = threading.Timer(args.stop_after, _thread.interrupt_main)
        alarm.daemon = True
        alarm.start()
    profiler = cProfile.Profile()
    if not args.stopwatches_only:
        profiler.enable()
    try:
        report = audit(
            problem,
            candidate,
            profile=args.profile,
            device=args.device,
            checks=args.checks,
            progress=seen,
        )
        verdict = str(report.verdict)
    except KeyboardInterrupt:
        report, verdict = None, f"interrupted after {args.stop_after} s"
    profiler.disable()
    wall = time.perf_counter() - began
    if not args.stopwatches_only:
        profiler.dump_stats(str(args.out / f"auditor-{os.getpid()}.pstats"))
    (args.out / "timeline.json").write_text(json.dumps(timeline, indent=1))
    spans = [
        {"what": label, "thread": thread, "from_s": a - began, "to_s": b - began}
        for label, thread, a, b in SPANS
    ]
    (args.out / "spans.json").write_text(json.dumps(spans))
    if report is not None:
        (args.out / "report.json").write_text(json.dumps(report.to_json(), indent=1, default=str))
    time.sleep(3.0)  # the children write their stats as they exit

    lines = [f"{problem} / {candidate}, {args.profile}: {verdict} in {wall:.1f} s", ""]
    for event in timeline:
        if event["kind"] != "probe":
            lines.append(
                f"{event['at_s']:8.2f}  {event['kind']:6} {event['what']} ({event['seconds']} s)"
            )
    lines.append("\nwall-clock stopwatches (calls, seconds in all, the slowest call):")
    for label, seconds in watches.items():
        if seconds:
            lines.append(
                f"  {label:34} {len(seconds):5d} {sum(seconds):8.2f} s {max(seconds):8.2f} s"
            )
    probes = [e for e in timeline if e["kind"] == "probe"]
    lines.append(f"\n{len(probes)} probes; gaps between consecutive probes over 0.5 s:")
    last = 0.0
    for event in probes:
        gap = float(event["at_s"]) - last
        if gap > 0.5:
            lines.append(f"{event['at_s']:8.2f}  +{gap:5.2f} s  {event['what']}")
        last = float(event["at_s"])
    profiled = [] if args.stopwatches_only else [args.out / f"auditor-{os.getpid()}.pstats"]
    lines += ["", *_anatomy(probes, spans)]
    for path in [*profiled, *sorted(children.glob("*.pstats"))]:
        lines += ["", "=" * 100, path.name, _top(path, args.top)]
    (args.out / "summary.txt").write_text("\n".join(lines))
    print("\n".join(lines[:60]))


if __name__ == "__main__":
    main()
