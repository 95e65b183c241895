"""What one candidate's worker may use, and how the auditor reads what it uses: wall time per
call, host memory of every process it started, device memory, and the shared regions its calls'
tensors cross in."""

from __future__ import annotations

import contextlib
import math
import os
import select
import shutil
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

MEMORY_POLL_S = 0.2
"""How often the host memory of a candidate's processes is read while the auditor waits on
them."""

_UNTIL_EXIT_STEP_S = 0.05
"""How often a child's end is looked for where the platform has no process descriptors."""


def machine_memory() -> int:
    """The host's physical memory, in bytes."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def host_share() -> int:
    """The host memory a candidate's processes may hold by default: half of the machine's."""
    return machine_memory() // 2


def over_memory(used: int, limit: int) -> str:
    """Why a candidate's processes were killed for the host memory they held."""
    return (
        f"the candidate's processes used {used / 2**30:.2f} GiB of host memory, more than the "
        f"limit of {limit / 2**30:.2f} GiB; they were killed."
    )


def region_most_bytes() -> int:
    """The most each of a worker's two regions grows to: a sixteenth of the host's memory, at
    most 16 GiB. Tensors past it cross in the pipe, in writes of 64 KiB: a mixture of 64
    experts (4 GB of weights a call) spent 145 s of 450 sending its calls when regions stopped
    at 2 GiB. A region grows only as far as a call's tensors need, and what its pages once
    held stays resident until the worker ends: the most is what that costs."""
    return min(16 << 30, machine_memory() // 16)


@dataclass(frozen=True)
class Limits:
    """What one candidate's worker may use. The worker's whole process group is killed when it
    goes past one of them, and the call counts as failed.

    timeout_s: wall time one call may take; an invocation of n calls gets n times as much.
    host_memory_bytes: resident memory of the worker and every process it started.
    gpu_memory_bytes: device memory: torch's allocator in the worker is capped at it, and the
        device's use beyond what it was when the worker became ready is checked after every
        invocation (memory taken around torch's allocator counts too). 0: no limit.
    load_timeout_s: wall time the child may take to start and import the candidate (a
        candidate that compiles an extension at import time needs minutes).
    """

    timeout_s: float = 120.0
    host_memory_bytes: int = 0
    gpu_memory_bytes: int = 0
    load_timeout_s: float = 600.0


def default_limits(timeout_s: float, device: str) -> Limits:
    """Half of the host's memory, and three quarters of the device memory that is free now:
    enough for any reasonable kernel, and the auditor keeps room for its own work."""
    import torch  # here, not above: the launcher imports this module before torch starts

    host = host_share()
    gpu = 0
    if torch.device(device).type == "cuda":
        free, _ = torch.cuda.mem_get_info(torch.device(device))
        gpu = free * 3 // 4
    return Limits(timeout_s=timeout_s, host_memory_bytes=host, gpu_memory_bytes=gpu)


def resident_bytes(group: int, namespaces: set[str] | None = None) -> int:
    """Resident memory of the processes a worker started as process group `group`: every
    process of the group and, under the sandbox, every process in the process-id namespace
    the sandbox made for them, where a process that moved to a session of its own still is.
    `namespaces` keeps those namespaces from one call to the next (the group's leader, the
    sandbox, may be gone by then); 0 where /proc is not there.

    Which processes there are comes from `PROCESSES`, one scan of /proc shared by every wait
    of this process; only the memory of the processes counted is read at each call."""
    own = _namespace("self")
    namespaces = set() if namespaces is None else namespaces
    listed = PROCESSES.listed()
    for process in listed:
        if process.group == group and process.namespace and process.namespace != own:
            namespaces.add(process.namespace)
    page = os.sysconf("SC_PAGE_SIZE")
    total = 0
    for process in listed:
        if process.group == group or process.namespace in namespaces:
            with contextlib.suppress(OSError, ValueError, IndexError):
                total += int(_read(f"/proc/{process.pid}/statm").split()[1]) * page
    return total


@dataclass(frozen=True)
class Listed:
    """One process as a scan of /proc saw it."""

    pid: str
    group: int
    """Its process group."""
    namespace: str
    """Its process-id namespace ("" where it cannot be read)."""


class ProcessTable:
    """The host's processes, scanned at most once every `fresh_s` however many waits ask.

    Every wait on a candidate's processes (the worker's channel, the sanitizer's and the
    interpreted run's children, the reference's measurement) reads their memory every
    `MEMORY_POLL_S`, and each used to scan /proc itself: every process's `stat` file read
    through `open`, five or six system calls each, every one of which gives up the
    interpreter's lock and takes it back. With six such waits at once, an H200 host's auditor
    spent 8% of its main thread in those scans during an audit of L1/092. One scan now serves
    every wait that asks within `fresh_s`, and a process's namespace, which it never changes,
    is read once (a host's hundreds of processes read five times a second took 34 s of a 450 s
    audit on a 16-core host)."""

    def __init__(self, fresh_s: float) -> None:
        self.fresh_s = fresh_s
        self._lock = threading.Lock()
        self._at = -math.inf
        self._listed: tuple[Listed, ...] = ()
        self._namespaces: dict[tuple[str, int], str] = {}
        """The namespace of each process seen by the last scan, by its pid and start time."""

    def listed(self) -> tuple[Listed, ...]:
        """The processes of a scan made at most `fresh_s` ago (this call's, if none was)."""
        with self._lock:
            if time.monotonic() - self._at >= self.fresh_s:
                self._listed = self._scan()
                self._at = time.monotonic()
            return self._listed

    def forget(self) -> None:
        """Scan again at the next call."""
        with self._lock:
            self._at = -math.inf

    def _scan(self) -> tuple[Listed, ...]:
        if not os.path.isdir("/proc"):
            return ()
        listed = []
        seen: dict[tuple[str, int], str] = {}
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                fields = _read(f"/proc/{entry.name}/stat").rsplit(b")", 1)[1].split()
                group, started = int(fields[2]), int(fields[19])
            except (OSError, ValueError, IndexError):
                continue  # the process ended while being read
            listed.append(Listed(entry.name, group, self._known(entry.name, started, seen)))
        self._namespaces = seen
        return tuple(listed)

    def _known(self, pid: str, started: int, seen: dict[tuple[str, int], str]) -> str:
        """`_namespace(pid)`, read once per process (a reused pid starts at another time),
        recorded in `seen` for the next scan."""
        key = (pid, started)
        namespace = self._namespaces.get(key) or _namespace(pid)
        if namespace:
            seen[key] = namespace
        return namespace


PROCESSES = ProcessTable(fresh_s=MEMORY_POLL_S / 2)
"""The process's one table of the host's processes."""


def _read(path: str) -> bytes:
    """A small /proc file's bytes, in three system calls (`open` takes five or six)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096)
    finally:
        os.close(fd)


def _namespace(pid: str) -> str:
    """The process-id namespace process `pid` is in ("" where it cannot be read)."""
    try:
        return os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return ""


CACHE_MOST_BYTES = 4 << 30
"""The most a candidate's own cache folder may hold: its compiled kernels take megabytes, an
extension built there hundreds. The same on every host, so no verdict depends on how full the
host's disk is."""

CACHE_MOST_FILES = 200_000
"""The most files it may hold (a folder of millions of empty files costs every reader)."""

CACHE_WALK_S = 5.0
"""How often the folder is read whatever its file system says (another process freeing space
there would hide what the candidate writes)."""


class FolderBound:
    """What a folder on the host that a candidate's processes write under the sandbox may hold:
    its own cache folder (`runner.auditor.sandbox.candidate_cache`, kept between its audits) or
    a one-shot child's job folder (`sandbox.job_bound`), named by `what` in the reason. At most
    `most_bytes` (`CACHE_MOST_BYTES` when not given) and `CACHE_MOST_FILES` files. Every wait
    on the candidate's processes asks `over()`, which costs one `statvfs` while the file
    system's free space has not dropped by what the folder may still take, and reads the
    folder (stopping once past the bound) when it has, or every `CACHE_WALK_S`. A candidate
    that filled the disk would fail every other audit, report and database write on the
    host."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        most_bytes: int = 0,
        what: str = "its cache folder",
        emptied: bool = True,
    ) -> None:
        self.folder = os.fspath(folder)
        self.what = what
        self.emptied = emptied
        """Whether a wait that finds the folder past its bound empties it (`empty`): a
        candidate's cache folder, kept between audits; not a job folder, which other runs may
        be writing and whose owner removes it once its run is read."""
        self._lock = threading.Lock()
        self.most_bytes = most_bytes or CACHE_MOST_BYTES
        self._held, _ = folder_held(self.folder, self.most_bytes, CACHE_MOST_FILES)
        self._free = _free_bytes(self.folder)
        self._walked = time.monotonic()

    def over(self) -> str:
        """Why the folder holds more than it may ("" while it does not)."""
        with self._lock:
            free = _free_bytes(self.folder)
            room = self.most_bytes - self._held
            if free >= self._free - room and time.monotonic() < self._walked + CACHE_WALK_S:
                return ""
            held, files = folder_held(self.folder, self.most_bytes, CACHE_MOST_FILES)
            self._held, self._free, self._walked = held, free, time.monotonic()
        if held > self.most_bytes:
            what = _size(self.most_bytes)
        elif files > CACHE_MOST_FILES:
            what = f"{CACHE_MOST_FILES:,} files"
        else:
            return ""
        then = "emptied" if self.emptied else "removed"
        return (
            f"the candidate's processes wrote more than {what} to {self.what}, the most it "
            f"may hold; they were killed and the folder {then}."
        )

    def empty(self) -> None:
        """Remove what the folder holds (once its processes are gone), the folder itself kept
        as it was."""
        with self._lock:
            with contextlib.suppress(OSError), os.scandir(self.folder) as entries:
                for entry in list(entries):
                    if entry.is_dir(follow_symlinks=False):
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        with contextlib.suppress(OSError):
                            os.unlink(entry.path)
            os.makedirs(self.folder, exist_ok=True)
            self._held, self._free = 0, _free_bytes(self.folder)


def folder_held(folder: str, most_bytes: int, most_files: int) -> tuple[int, int]:
    """The bytes (allocated blocks) and files under `folder`, read until either passes its
    most; links are not followed."""
    held = files = 0
    pending = [folder]
    while pending and held <= most_bytes and files <= most_files:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                files += 1
                if held > most_bytes or files > most_files:
                    break  # one folder of millions of entries is read no further either
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        held += entry.stat(follow_symlinks=False).st_blocks * 512
    return held, files


def _size(count: int) -> str:
    return f"{count / 2**30:.2f} GiB" if count >= 1 << 30 else f"{count / 2**20:.0f} MiB"


def _free_bytes(folder: str) -> int:
    try:
        found = os.statvfs(folder)
    except OSError:
        return 0
    return found.f_bavail * found.f_frsize


def passed_bound(over_memory: str, over_disk: str) -> tuple[str, str]:
    """The bound a child's processes went past, as a stopped run's kind names it
    ("host-memory" or "disk"), and why; ("", "") where they went past none."""
    if over_memory:
        return "host-memory", over_memory
    if over_disk:
        return "disk", over_disk
    return "", ""


@dataclass(frozen=True)
class Waited:
    """How a wait on a one-shot child (`wait_within`) ended."""

    returncode: int | None
    """Its exit code; None when it was still running (past its deadline, over its memory or
    stopped), for the caller to kill."""
    timed_out: bool = False
    over_memory: str = ""
    """Why its processes hold more host memory than allowed ("" when they do not)."""
    over_disk: str = ""
    """Why a folder it writes holds more than allowed (`FolderBound`; "" when none does)."""
    full: FolderBound | None = None
    """The folder's bound it went past (None when it went past none)."""


def wait_within(
    process: subprocess.Popen[bytes],
    deadline: float,
    host_memory_bytes: int = 0,
    stop: threading.Event | None = None,
    folders: Sequence[FolderBound | None] = (),
) -> Waited:
    """Wait for `process` until it exits, until `deadline` (`time.monotonic`), until `stop` is
    set, until its processes (`resident_bytes`) hold more than `host_memory_bytes` of host
    memory (0: half of the machine's), or until one of the folders it writes holds more than
    its bound in `folders` allows (None: not bounded), reading both every `MEMORY_POLL_S`. Its
    output must go to files, not pipes this wait does not read."""
    limit = host_memory_bytes or host_share()
    namespaces: set[str] = set()
    while (returncode := exited(process)) is None:
        left = deadline - time.monotonic()
        if left <= 0:
            return Waited(None, timed_out=True)
        if stop is not None and stop.is_set():
            return Waited(None)
        used = resident_bytes(process.pid, namespaces)
        if used > limit:
            return Waited(None, over_memory=over_memory(used, limit))
        for bound in folders:
            if bound is not None and (why := bound.over()):
                return Waited(None, over_disk=why, full=bound)
        until_exit(process, min(left, MEMORY_POLL_S))
    return Waited(returncode)


def exited(process: subprocess.Popen[bytes]) -> int | None:
    """The child's exit status once it has ended (a signal's as its negative number), None
    while it runs, read without reaping it: until it is reaped (`launch.end_group`), its pid,
    and so its process group's id, is no other process's, so the group can be killed with
    whatever it left behind and nothing else."""
    if process.returncode is not None:
        return process.returncode
    try:
        seen = os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (AttributeError, ChildProcessError):  # no waitid here, or reaped already
        return process.poll()
    if seen is None:
        return None
    return seen.si_status if seen.si_code == os.CLD_EXITED else -seen.si_status


def exited_within(process: subprocess.Popen[bytes], grace_s: float) -> int | None:
    """`exited`, once the child has had up to `grace_s` to end (None: it still runs)."""
    code = exited(process)
    if code is None:
        until_exit(process, grace_s)
        code = exited(process)
    return code


def until_exit(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Wait until the child ends or `timeout_s` passes, without reaping it (`exited`)."""
    try:
        fd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no process descriptors here: a short sleep instead
        time.sleep(min(timeout_s, _UNTIL_EXIT_STEP_S))
        return
    try:
        select.select([fd], [], [], max(timeout_s, 0.0))
    finally:
        os.close(fd)
