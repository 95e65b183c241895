"""Auditing on a Ray cluster: one Ray task per job, each result handed over (and stored, by the
caller) the moment it arrives, with the same time limit, hand-out records and retry rule as the
local slots."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from kernelaudit.corpus.jobs import Job
from kernelaudit.corpus.pool import Departures, OnResult
from kernelaudit.corpus.slot import job_message, result_of, run_job
from kernelaudit.corpus.store import MAX_TRIES, Flight, JobResult
from kernelaudit.errors import UsageError

LOCAL = "local"
"""The address that starts a Ray instance on this machine for the run alone."""


@dataclass(frozen=True)
class _Task:
    key: str
    job: Job
    submitted: float
    tries: int


def run_ray(
    jobs: list[tuple[str, Job]],
    address: str,
    device: str,
    profile: str,
    checks: list[str] | None,
    on_result: OnResult,
    departures: Departures,
    job_timeout: float | None = None,
    workers: int | None = None,
) -> None:
    """Audit `jobs` as Ray tasks on the cluster at `address` ("local": a Ray instance started
    here with `workers` CPUs, ended with the run), one GPU each where the cluster has GPUs
    (and `device` is not "cpu"). Every path must be readable on every node.

    The run keeps only as many tasks submitted as the cluster can run at once, so that a
    task's time limit counts from about when it starts; a task past it is cancelled (its
    worker process killed) and stored as a timeout. A task whose process dies is submitted
    again until the job has been tried `MAX_TRIES` times, then stored as a crash."""
    try:
        import ray
    except ImportError:
        raise UsageError(
            "--ray needs Ray, which is not installed; pip install 'kernelaudit[ray]'"
        ) from None
    started = not ray.is_initialized()
    if started and address == LOCAL:
        ray.init(num_cpus=workers or 1, include_dashboard=False)
    elif started:
        ray.init(address=address)
    try:
        _run(ray, jobs, address, device, profile, checks, on_result, departures, job_timeout)
    finally:
        if started:
            ray.shutdown()


def _run(
    ray: Any,
    jobs: list[tuple[str, Job]],
    address: str,
    device: str,
    profile: str,
    checks: list[str] | None,
    on_result: OnResult,
    departures: Departures,
    job_timeout: float | None,
) -> None:
    resources = ray.cluster_resources()
    has_gpus = resources.get("GPU", 0) > 0
    if device == "cuda" and not has_gpus:
        raise UsageError(
            f"--device cuda was asked for but the Ray cluster at {address} has no GPUs; "
            "pass --device cpu or auto"
        )
    gpus = has_gpus and device != "cpu"
    capacity = max(1, int(resources.get("GPU" if gpus else "CPU", 1)))
    # Ray's own retries would hand a job out behind the hand-out records' back
    task = ray.remote(num_gpus=1 if gpus else 0, max_retries=0)(run_job)
    where = "cuda" if gpus else "cpu"
    label = f"ray:{where}"
    pending = deque(jobs)
    running: dict[Any, _Task] = {}
    try:
        while pending or running:
            while pending and len(running) < capacity:
                key, job = pending.popleft()
                tries = departures.depart(Flight(key, label, None, 0))
                ref = task.remote(job_message(key, job), profile, checks, where)
                running[ref] = _Task(key, job, time.perf_counter(), tries)
            wait = None
            if job_timeout is not None:
                first = min(t.submitted for t in running.values())
                wait = max(0.0, first + job_timeout - time.perf_counter())
            finished, _ = ray.wait(list(running), num_returns=1, timeout=wait)
            for ref in finished:
                done = running.pop(ref)
                try:
                    answer = ray.get(ref)
                except Exception as error:
                    # the task's process died (out of memory, a node lost)
                    message = f"the Ray task failed on the job's try {done.tries} of {MAX_TRIES}"
                    if done.tries < MAX_TRIES:
                        departures.ended(done.key, f"{message}: {error}")
                        pending.appendleft((done.key, done.job))
                    else:
                        on_result(_failure(done, f"{message}: {error}", label, "crash"))
                    continue
                on_result(result_of(done.key, done.job, answer, label))
            now = time.perf_counter()
            for ref, overdue in list(running.items()):
                if job_timeout is not None and now - overdue.submitted >= job_timeout:
                    ray.cancel(ref, force=True)
                    del running[ref]
                    error = f"no result within --job-timeout {job_timeout:g} s; its task was killed"
                    on_result(_failure(overdue, error, label, "timeout"))
    except BaseException:
        departures.abandon([t.key for t in running.values()])
        raise


def _failure(task: _Task, error: str, device: str, status: str) -> JobResult:
    return JobResult(
        task.key, task.job, None, error, device, time.perf_counter() - task.submitted, status
    )
