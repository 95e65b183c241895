"""Audit every runnable SOL-ExecBench problem with the problem's own reference as the candidate,
one audit per local GPU at a time, and record what each audit cost and concluded.

Usage (from the repository root):

    # every problem, one worker per GPU, smallest float64 inputs first; no new audit starts
    # after 330 s and none runs past 180 s, so the run ends inside 10 minutes
    python benchmarks/solexecbench_scale.py ../shared/solexecbench --out scale/results.json \\
        --profile quick --order small-first --stop-after 330 --timeout 180
    # the problems in a random order drawn from --seed, so the first n audited are a uniform
    # sample of the runnable problems; --code names the code audited, kept in the record
    python benchmarks/solexecbench_scale.py ../shared/solexecbench --out scale/results.json \\
        --profile default --order shuffled --seed 0 --code d5e0250
    # go on where an earlier run stopped (its file, or the --out file when none is named)
    python benchmarks/solexecbench_scale.py ../shared/solexecbench --out scale/results.json \\
        --skip-done earlier.json
    # this machine's CPU, two tiny problems
    python benchmarks/solexecbench_scale.py ../shared/solexecbench --out scale/results.json \\
        --device cpu --profile quick --only 021_rmsnorm_h128 L1/011_rotary_position_embedding

Each problem's candidate is a solution.json written under the work folder (default: beside
--out), holding the definition's reference source with a wrapper that returns a reference's
dict of outputs as a tuple in the definition's order, passed outputs by return. Each audit is
`python -m kernelaudit check PROBLEM SOLUTION --device cuda:N` in a process of its own, its
stdout, stderr, JSON and HTML reports kept under the work folder. A problem is not runnable when
the format's reader says so (NVFP4 without a Blackwell GPU, absent safetensors files), when its
float64 inputs cannot fit on the GPU, or when the references record
(benchmarks/results/solexecbench-references-h100.json) saw its float64 reference run out of memory
on a GPU of the same name. --out is rewritten after every problem, with a summary: counts by
status and verdict, median and 90th-percentile seconds, wall time and problems per hour over
every run it holds, each FAIL with its first finding's title, and each error with its reason.
benchmarks/solexecbench_scale_gpu.sh runs it inside one 10-minute command.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch
from solexecbench_references import float64_bytes, too_large

import kernelaudit
from kernelaudit.formats import read_problem, unrunnable
from kernelaudit.runner.auditor.threads import thread_environment, thread_share

ROOT = Path(__file__).resolve().parent.parent
REFERENCES = ROOT / "benchmarks" / "results" / "solexecbench-references-h100.json"
TAIL_CHARS = 2000
TITLE_CHARS = 240
STOP_GRACE_S = 10.0
WRAPPER = '''

_OUTPUTS = {outputs!r}


def returned_in_order(*args):
    """The reference's outputs, a dict of them returned as a tuple in the definition's order."""
    returned = run(*args)
    if isinstance(returned, dict):
        return tuple(returned[name] for name in _OUTPUTS)
    return returned
'''


@dataclass(frozen=True)
class Failure:
    check: str
    key: str
    title: str


@dataclass(frozen=True)
class Outcome:
    """One problem's audit. status: done (the audit gave a verdict), timeout, error (no
    report: `reason` and `stderr_tail` say why) or not-runnable (`reason`)."""

    problem: str
    level: str
    status: str
    profile: str
    device: str
    device_name: str
    float64_bytes: int
    seconds: float = 0.0
    limit_s: float = 0.0
    verdict: str | None = None
    phases: dict[str, float] | None = None
    check_seconds: dict[str, float] | None = None
    """Each check's seconds: its probes' and its concluding experiment's (the report's)."""
    judging_seconds: dict[str, float] | None = None
    """Each check's seconds judging observations (the report's)."""
    failures: tuple[Failure, ...] = ()
    exit_code: int | None = None
    reason: str = ""
    stderr_tail: str = ""
    log: str = ""
    reference_seconds: float | None = None
    """The float64 reference's own seconds at its smallest workload, from the references
    record."""


def outcome_from_json(data: dict[str, Any]) -> Outcome:
    failures = tuple(Failure(**f) for f in data.get("failures", ()))
    return Outcome(**{**data, "failures": failures})


@dataclass(frozen=True)
class Job:
    """A problem to audit, or one settled without an audit (`settled`: error or not-runnable,
    for `reason`)."""

    folder: Path
    problem: str
    float64_bytes: int
    reference_seconds: float | None
    settled: str = ""
    reason: str = ""

    def outcome(self, profile: str, device: str, device_name: str, limit_s: float) -> Outcome:
        """The problem's record before its audit: an error until the audit says otherwise."""
        return Outcome(
            self.problem,
            self.folder.parent.name,
            self.settled or "error",
            profile,
            device,
            device_name,
            self.float64_bytes,
            limit_s=limit_s,
            reason=self.reason,
            log=f"logs/{_slug(self.problem)}.out" if not self.settled else "",
            reference_seconds=self.reference_seconds,
        )


def problem_id(folder: Path) -> str:
    return f"{folder.parent.name}/{folder.name}"


def problem_folders(root: Path) -> list[Path]:
    """Every problem folder under `root` (`<level>/<problem>/definition.json`), in order."""
    return sorted(p.parent for p in root.glob("*/*/definition.json"))


def plan(root: Path, only: list[str] | None, device: str, device_name: str) -> list[Job]:
    """Every problem under `root` (those whose id holds one of `only`), each settled here when
    it does not load or cannot run on `device`."""
    folders = problem_folders(root)
    if not folders:
        sys.exit(f"no */*/definition.json under {root}; pass the SOL-ExecBench problems folder")
    known = _references_record()
    jobs = []
    for folder in folders:
        name = problem_id(folder)
        if only and not any(part in name for part in only):
            continue
        earlier = known.get(name, {})
        ran = earlier.get("status") == "ran in float64"
        job = Job(folder, name, 0, earlier.get("seconds") if ran else None)
        try:
            problem = read_problem(folder)
        except Exception as error:  # the audit would fail the same way: say so without one
            reason = f"the problem does not load: {type(error).__name__}: {error}"
            jobs.append(replace(job, settled="error", reason=reason))
            continue
        job = replace(job, float64_bytes=float64_bytes(problem))
        reason = unrunnable(problem) or too_large(problem, device) or _misfit(earlier, device_name)
        jobs.append(replace(job, settled="not-runnable", reason=reason) if reason else job)
    return jobs


def _references_record() -> dict[str, dict[str, Any]]:
    """Each problem's entry in the references record, where there is one."""
    if not REFERENCES.is_file():
        return {}
    entries = json.loads(REFERENCES.read_text())
    device = entries.get("device", "")
    return {str(e["problem"]): {**e, "device": device} for e in entries["problems"]}


def _misfit(earlier: dict[str, Any], device_name: str) -> str | None:
    """Why the references record says the float64 reference does not fit on this GPU model."""
    if earlier.get("status") not in ("out of device memory", "not run"):
        return None
    if earlier.get("device") != device_name:
        return None
    return f"its float64 reference did not fit on a {device_name}: {earlier.get('reason', '')}"


def write_shim(folder: Path, shims: Path) -> Path:
    """A solution.json whose candidate is the problem's own reference."""
    definition = json.loads((folder / "definition.json").read_text())
    source = definition["reference"] + WRAPPER.format(outputs=tuple(definition["outputs"]))
    solution = {
        "name": "reference",
        "definition": definition["name"],
        "author": "the problem's definition.json",
        "spec": {
            "languages": ["pytorch"],
            "target_hardware": ["cpu", "H100"],
            "entry_point": "reference.py::returned_in_order",
            "dependencies": [],
            "destination_passing_style": False,
        },
        "sources": [{"path": "reference.py", "content": source}],
        "description": f"the reference of {problem_id(folder)}, audited as a candidate",
    }
    target = shims / _slug(problem_id(folder)) / "solution.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps(solution, indent=1))
    return target


def _slug(name: str) -> str:
    return name.replace("/", "__")


class Run:
    """The problems left to hand out, the audits in flight and the results file, shared by
    the workers."""

    def __init__(
        self,
        args: argparse.Namespace,
        pending: list[Job],
        kept: list[Outcome],
        meta: dict[str, Any],
        environment: dict[str, str],
    ):
        self.args = args
        self.pending = pending
        self.outcomes = {o.problem: o for o in kept}
        self.meta = meta
        self.environment = environment
        self.lock = threading.Lock()
        self.began = time.monotonic()
        self.running: dict[str, subprocess.Popen[bytes]] = {}
        self.cut_short: list[str] = []
        self.audited = 0
        self.stopping = False

    def next_job(self) -> Job | None:
        stop = self.args.stop_after
        with self.lock:
            if self.stopping or not self.pending:
                return None
            if stop is not None and time.monotonic() - self.began >= stop:
                return None
            return self.pending.pop(0)

    def record(self, outcome: Outcome) -> None:
        with self.lock:
            if self.stopping:
                return  # cut short by the stop, not finished: a later run audits it again
            self.outcomes[outcome.problem] = outcome
            self.audited += outcome.status in ("done", "timeout", "error")
            line = f"{outcome.status:12} {outcome.verdict or '-':4} {outcome.seconds:7.1f} s"
            print(f"{line}  {outcome.device}  {outcome.problem}  {_first_title(outcome)}")
            self.write()

    def summary(self) -> dict[str, Any]:
        outcomes = list(self.outcomes.values())
        return summary(outcomes, self.runs(), len(self.pending), self.cut_short)

    def runs(self) -> list[dict[str, Any]]:
        """The earlier runs of the results file, and this one so far."""
        this = {
            "started": self.meta["started"],
            "wall_s": round(time.monotonic() - self.began, 1),
            "audited": self.audited,
            "workers": self.meta["workers"],
            "profile": self.args.profile,
        }
        return [*self.meta["earlier_runs"], this]

    def write(self) -> None:
        document = {
            **{k: v for k, v in self.meta.items() if k != "earlier_runs"},
            "runs": self.runs(),
            "summary": self.summary(),
            "problems": [asdict(o) for o in sorted(self.outcomes.values(), key=_by_problem)],
        }
        temporary = self.args.out.with_name(f".{self.args.out.name}.part")
        temporary.write_text(json.dumps(document, indent=1))
        temporary.replace(self.args.out)

    def stop(self) -> None:
        """End the audits still running (each is its own process group, its workers in it)
        and write what is settled."""
        with self.lock:
            self.stopping = True
            self.cut_short = sorted(self.running)
            running = list(self.running.values())
        _end(running)
        with self.lock:
            self.write()


def _by_problem(outcome: Outcome) -> str:
    return outcome.problem


def _first_title(outcome: Outcome) -> str:
    if outcome.failures:
        return f"[{outcome.failures[0].check}] {outcome.failures[0].title}"
    return outcome.reason.splitlines()[0][:160] if outcome.reason else ""


def _end(processes: list[subprocess.Popen[bytes]]) -> None:
    """Stop `processes`, each the leader of its own group: all are asked at once, and a group
    still running after the grace period is killed."""
    for process in processes:
        if process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it ended in between
                os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for process in processes:
        try:
            process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def work(run: Run, device: str, device_name: str) -> None:
    """One worker: audit the next problem on `device` until none is left to hand out."""
    while (job := run.next_job()) is not None:
        base = job.outcome(run.args.profile, device, device_name, run.args.timeout)
        try:
            outcome = audit(run, job, base)
        except Exception as error:  # one problem's broken files must not stop the worker
            outcome = replace(base, reason=f"preparing or reading the audit raised {error!r}")
        run.record(outcome)


def audit(run: Run, job: Job, base: Outcome) -> Outcome:
    """Audit one problem's reference as a candidate in a `kernelaudit check` process."""
    args = run.args
    slug = _slug(job.problem)
    logs, reports = args.work / "logs", args.work / "reports"
    report = reports / f"{slug}.json"
    report.unlink(missing_ok=True)
    solution = write_shim(job.folder, args.work / "shims")
    # `-m kernelaudit` is the `kernelaudit` command (its worker started before torch is
    # imported); `-m kernelaudit.cli` the command line alone, for comparison
    entry = "kernelaudit.cli" if args.no_early_worker else "kernelaudit"
    command = [sys.executable, "-m", entry, "check", str(job.folder), str(solution)]
    command += ["--profile", args.profile, "--device", base.device, "--json", str(report)]
    command += ["--html", str(report.with_suffix(".html"))]
    if args.checks:
        command += ["--checks", args.checks]
    began = time.monotonic()
    with (logs / f"{slug}.out").open("wb") as out, (logs / f"{slug}.err").open("wb") as err:
        process = subprocess.Popen(
            command, stdout=out, stderr=err, env=run.environment, start_new_session=True
        )
        with run.lock:
            run.running[job.problem] = process
            late = run.stopping  # started while the stop was ending the others
        if late:
            _end([process])
        try:
            code: int | None = process.wait(args.timeout)
        except subprocess.TimeoutExpired:
            code = None
            _end([process])
        with run.lock:
            del run.running[job.problem]
    seconds = round(time.monotonic() - began, 2)
    tail = (logs / f"{slug}.err").read_bytes()[-TAIL_CHARS:].decode(errors="replace")
    if code is None:
        reason = f"the audit ran past {args.timeout:.0f} s"
        return replace(base, status="timeout", seconds=seconds, stderr_tail=tail, reason=reason)
    if code not in (0, 1) or not report.is_file():
        last = next((line for line in reversed(tail.splitlines()) if line.strip()), "")
        reason = f"kernelaudit check exited with {code} and wrote no report: {last.strip()}"
        return replace(base, seconds=seconds, exit_code=code, stderr_tail=tail, reason=reason)
    found = json.loads(report.read_text())["reports"][0]
    failures = tuple(
        Failure(f["check"], f["key"], f["title"][:TITLE_CHARS])
        for f in found["findings"]
        if f["severity"] == "fail"
    )
    done = replace(base, status="done", seconds=seconds, exit_code=code, failures=failures)
    return replace(
        done,
        verdict=found["verdict"],
        phases=found["phases"],
        check_seconds=_slowest_first(found.get("check_seconds", {})),
        judging_seconds=_slowest_first(found.get("judging_seconds", {})),
    )


def _slowest_first(seconds: dict[str, float]) -> dict[str, float]:
    return {name: round(s, 3) for name, s in sorted(seconds.items(), key=lambda kv: -kv[1])}


def summary(
    outcomes: list[Outcome], runs: list[dict[str, Any]], remaining: int, cut_short: list[str]
) -> dict[str, Any]:
    """Counts by status and verdict, the audits' seconds, throughput, the FAILs and the
    errors; how many problems were never handed out, and those whose audit the stop ended.
    The median and 90th percentile are of the audits that ended; `*_with_timeouts_s` count a
    timed-out audit at the seconds it was cut at (a lower bound of what it would take)."""
    seconds = sorted(o.seconds for o in outcomes if o.status == "done")
    cut = sorted(o.seconds for o in outcomes if o.status in ("done", "timeout"))
    wall = sum(float(r["wall_s"]) for r in runs)
    audited = sum(int(r["audited"]) for r in runs)
    return {
        "by_status": dict(Counter(o.status for o in outcomes)),
        "by_verdict": dict(Counter(o.verdict for o in outcomes if o.verdict)),
        "median_s": _rank(seconds, 0.5),
        "p90_s": _rank(seconds, 0.9),
        "median_with_timeouts_s": _rank(cut, 0.5),
        "p90_with_timeouts_s": _rank(cut, 0.9),
        "wall_s": round(wall, 1),
        "audited": audited,
        "problems_per_hour": round(audited * 3600 / wall, 1) if wall > 0 else None,
        "not_handed_out": remaining,
        "cut_short": cut_short,
        "fails": [
            {"problem": o.problem, "first_finding": _first_title(o)}
            for o in sorted(outcomes, key=_by_problem)
            if o.verdict == "FAIL"
        ],
        "errors": [
            {"problem": o.problem, "reason": o.reason} for o in outcomes if o.status == "error"
        ],
    }


def _rank(ordered: list[float], share: float) -> float | None:
    """The nearest-rank percentile of an ascending list."""
    if not ordered:
        return None
    return ordered[max(0, math.ceil(share * len(ordered)) - 1)]


def _kept(path: Path | None, profile: str, timeout: float) -> tuple[list[Outcome], list[Any]]:
    """What an earlier results file settles: problems audited in this profile, and those that
    ran past a limit at least as long as this run's; and that file's runs."""
    if path is None or not path.is_file():
        return [], []
    earlier = json.loads(path.read_text())
    kept = [
        o
        for o in map(outcome_from_json, earlier["problems"])
        if o.profile == profile
        and (o.status == "done" or (o.status == "timeout" and o.limit_s >= timeout))
    ]
    return kept, list(earlier.get("runs", []))


def _code(path: Path | None) -> str:
    """The code an earlier results file names (`--code`), or ""."""
    if path is None or not path.is_file():
        return ""
    return str(json.loads(path.read_text()).get("code", ""))


def _devices(device: str) -> list[tuple[str, str]]:
    """Each worker's device and the device's name: one per GPU, or the CPU."""
    if device == "cpu":
        return [("cpu", platform.processor() or platform.machine())]
    if not torch.cuda.is_available():
        sys.exit("no CUDA device is visible; pass --device cpu to audit on this machine's CPU")
    return [(f"cuda:{i}", torch.cuda.get_device_name(i)) for i in range(torch.cuda.device_count())]


def _environment(workers: int, device: str) -> dict[str, str]:
    """The audits' environment: kernelaudit importable from this checkout, and the cores
    divided among the workers."""
    env = dict(os.environ)
    source = str(Path(kernelaudit.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (source, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(thread_environment(thread_share(device, workers)))
    return env


def _stopped(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="folder holding <level>/<problem>/definition.json")
    parser.add_argument("--out", type=Path, required=True, help="results JSON, rewritten often")
    parser.add_argument("--work", type=Path, help="shims, logs, reports (default: beside --out)")
    parser.add_argument("--profile", default="quick", choices=("quick", "default", "thorough"))
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    parser.add_argument("--only", nargs="+", help="audit the problems whose id holds one of these")
    parser.add_argument(
        "--order", default="small-first", choices=("small-first", "listed", "shuffled")
    )
    parser.add_argument("--seed", type=int, default=0, help="the shuffled order's seed")
    parser.add_argument("--code", default="", help="a name for the code audited, recorded")
    parser.add_argument("--checks", help="comma-separated checks each audit runs (default: all)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per audit")
    parser.add_argument(
        "--stop-after", type=float, help="start no audit after this many seconds of the run"
    )
    parser.add_argument(
        "--no-early-worker",
        action="store_true",
        help="start each audit's worker when the audit asks for it, not as the command starts",
    )
    parser.add_argument(
        "--skip-done",
        nargs="?",
        type=Path,
        const=True,
        metavar="EARLIER",
        help="keep what an earlier results file (default: --out) settles and audit the rest",
    )
    args = parser.parse_args()
    earlier = args.out if args.skip_done is True else args.skip_done
    if isinstance(args.skip_done, Path) and not args.skip_done.is_file():
        sys.exit(f"--skip-done {args.skip_done}: no such results file; pass one --out wrote")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.work = args.work or args.out.with_name(f"{args.out.stem}-work")
    for folder in ("logs", "reports", "shims"):
        (args.work / folder).mkdir(parents=True, exist_ok=True)
    devices = _devices(args.device)
    kept, earlier_runs = _kept(earlier, args.profile, args.timeout)
    earlier_code = _code(earlier)
    if kept and args.code != earlier_code:
        sys.exit(
            f"--skip-done {earlier}: its audits are of code {earlier_code or '(unnamed)'!r}, "
            f"this run's of {args.code or '(unnamed)'!r}; pass the same --code, or no "
            "--skip-done, so one record never mixes two codes"
        )
    jobs = plan(args.root, args.only, *devices[0])
    if args.order == "small-first":
        jobs.sort(key=lambda job: job.float64_bytes)
    elif args.order == "shuffled":
        random.Random(args.seed).shuffle(jobs)
    settled = {o.problem for o in kept}
    pending = [job for job in jobs if not job.settled and job.problem not in settled]
    skipped = [job.outcome(args.profile, *devices[0], args.timeout) for job in jobs if job.settled]
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "command": " ".join(sys.argv),
        "root": str(args.root),
        "profile": args.profile,
        "checks": args.checks or "all",
        "devices": [name for _, name in devices],
        "workers": len(devices),
        "torch": torch.__version__,
        "order": args.order if args.order != "shuffled" else f"shuffled, seed {args.seed}",
        "code": args.code,
        "earlier_runs": earlier_runs,
    }
    print(
        f"{len(pending)} to audit on {len(devices)} worker(s); {len(kept)} settled by "
        f"{earlier or 'no earlier run'}; {len(skipped)} not runnable or not loading",
        flush=True,
    )
    run = Run(args, pending, [*kept, *skipped], meta, _environment(len(devices), args.device))
    signal.signal(signal.SIGTERM, _stopped)
    workers = [
        threading.Thread(target=work, args=(run, device, name), daemon=True)
        for device, name in devices
    ]
    try:
        for worker in workers:
            worker.start()
        while any(worker.is_alive() for worker in workers):
            for worker in workers:
                worker.join(0.5)
    finally:
        run.stop()
    print(json.dumps(run.summary(), indent=1))


if __name__ == "__main__":
    main()
