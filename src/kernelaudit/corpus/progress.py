"""What a corpus run shows while it runs: one line per finished job (its verdict or status,
seconds and device, with jobs done of the total, jobs per hour and the time left), so a CI log
or a pipe shows progress too; and on a terminal a live bar with the same figures."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from kernelaudit.corpus.store import JobResult
from kernelaudit.corpus.summary import first_line, job_label, styled


@dataclass(frozen=True)
class Throughput:
    """How far a run has come: `done` of `total` jobs in `elapsed` seconds."""

    done: int
    total: int
    elapsed: float

    @property
    def per_hour(self) -> float:
        return self.done / self.elapsed * 3600 if self.elapsed > 0 else 0.0

    @property
    def eta(self) -> str:
        """The time left at the rate so far, in words."""
        if self.done >= self.total:
            return "done"
        if not self.per_hour:
            return "ETA unknown"
        return f"ETA {duration((self.total - self.done) / self.per_hour * 3600)}"

    def __str__(self) -> str:
        return f"{self.done}/{self.total}, {self.per_hour:.0f} jobs/hour, {self.eta}"


def duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def job_line(result: JobResult, throughput: Throughput | None) -> str:
    """A finished job in one line of console markup."""
    outcome = result.report["verdict"] if result.report is not None else result.status
    where = job_label(result.job.problem, result.job.candidate)
    seconds = "?" if result.seconds is None else f"{result.seconds:.1f}"
    line = f"{styled(outcome, 10)} {escape(where)}  ({seconds} s, {escape(result.device)})"
    if result.report is None:
        line += f": {escape(first_line(result.error))}"
    return line if throughput is None else f"{escape(f'[{throughput}]')} {line}"


@contextmanager
def progress(console: Console, total: int) -> Iterator[Callable[[], Throughput]]:
    """Yields the function to call after each finished job, which returns the run's
    throughput so far; on a terminal a live bar shows it too."""
    began = time.perf_counter()
    done = 0

    def advance() -> Throughput:
        nonlocal done
        done += 1
        return Throughput(done, total, time.perf_counter() - began)

    if not console.is_terminal:
        yield advance
        return
    columns = (
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[rate]}"),
        TextColumn("{task.fields[eta]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("", total=total, rate="", eta="")

        def advance_bar() -> Throughput:
            now = advance()
            bar.update(task, completed=now.done, rate=f"{now.per_hour:.0f} jobs/hour", eta=now.eta)
            return now

        yield advance_bar
