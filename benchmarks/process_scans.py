"""What the waits on a candidate's processes cost the auditor's main thread.

While an audit runs, several of the auditor's threads wait on processes at once (the worker's
channel, the sanitizer's runs, the interpreted run, the reference's measurement), each reading
the memory of the processes it waits on every `MEMORY_POLL_S`
(`runner.auditor.limits.resident_bytes`). This starts `--processes` idle processes (a busy host's),
`--waits` threads polling as those waits do, and times a fixed piece of Python work on the main
thread (small torch operations, as judging makes) without and with them polling, alternated. Run it
with `PYTHONPATH` set to each tree to compare.

    python benchmarks/process_scans.py --processes 300 --waits 6 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time

import torch

from kernelaudit.runner.auditor import limits


def main_thread_work(rounds: int) -> float:
    """Seconds for `rounds` rounds of small tensor operations and Python bookkeeping."""
    values = torch.randn(256)
    started = time.perf_counter()
    for _ in range(rounds):
        total = 0.0
        for k in range(20):
            total += float((values * k).sum())
        _ = {str(k): k for k in range(50)}
    return time.perf_counter() - started


def polled(
    waits: int, stop: threading.Event, polling: threading.Event, counts: list[int]
) -> list[threading.Thread]:
    """`waits` threads, each reading its own process group's memory every `MEMORY_POLL_S`
    while `polling` is set."""

    def wait(k: int) -> None:
        namespaces: set[str] = set()
        while not stop.is_set():
            if polling.is_set():
                limits.resident_bytes(os.getpid(), namespaces)
                counts[k] += 1
            stop.wait(limits.MEMORY_POLL_S)

    threads = [threading.Thread(target=wait, args=(k,), daemon=True) for k in range(waits)]
    for thread in threads:
        thread.start()
    return threads


def measure(waits: int, rounds: int, repeats: int) -> dict[str, object]:
    """The main thread's work alone and with the waits polling, alternated `repeats` times (a
    busy host's drift falls on both)."""
    stop, polling = threading.Event(), threading.Event()
    counts = [0] * waits
    threads = polled(waits, stop, polling, counts)
    alone, waited = [], []
    polled_s = 0.0
    for _ in range(repeats):
        polling.clear()
        time.sleep(limits.MEMORY_POLL_S)  # the waits' last polls end
        alone.append(main_thread_work(rounds))
        polling.set()
        began = time.perf_counter()
        waited.append(main_thread_work(rounds))
        polled_s += time.perf_counter() - began
    stop.set()
    for thread in threads:
        thread.join()
    scanned = time.perf_counter()
    for _ in range(20):
        if hasattr(limits, "PROCESSES"):
            limits.PROCESSES.forget()
        limits.resident_bytes(os.getpid())
    one_scan = (time.perf_counter() - scanned) / 20
    return {
        "waits": waits,
        "alone_s": sorted(alone),
        "with_waits_s": sorted(waited),
        "alone_median_s": sorted(alone)[len(alone) // 2],
        "with_waits_median_s": sorted(waited)[len(waited) // 2],
        "polls_per_s": sum(counts) / polled_s if polled_s else 0.0,
        "one_uncontended_scan_ms": one_scan * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=300, help="idle processes to start")
    parser.add_argument("--waits", type=int, default=6, help="threads polling at once")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--json", help="where to write the figures")
    args = parser.parse_args()
    idle = [
        subprocess.Popen(["sleep", "600"], stdout=subprocess.DEVNULL) for _ in range(args.processes)
    ]
    try:
        time.sleep(0.5)
        row = {
            "code": limits.__file__,
            "table": hasattr(limits, "PROCESSES"),
            "host_processes": sum(1 for name in os.listdir("/proc") if name.isdigit()),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "torch": torch.__version__,
            **measure(args.waits, args.rounds, args.repeats),
        }
    finally:
        for process in idle:
            process.kill()
        for process in idle:
            process.wait()
    alone, waited = row["alone_median_s"], row["with_waits_median_s"]
    print(
        f"{row['host_processes']} processes, {args.waits} waits: main thread's work "
        f"{alone:.3f} s alone, {waited:.3f} s with the waits ({waited / alone:.2f}x), "  # type: ignore[operator]
        f"medians of {args.repeats} alternated; one full scan "
        f"{row['one_uncontended_scan_ms']:.2f} ms",
        file=sys.stderr,
    )
    if args.json:
        with open(args.json, "w") as out:
            json.dump(row, out, indent=1)


if __name__ == "__main__":
    main()
