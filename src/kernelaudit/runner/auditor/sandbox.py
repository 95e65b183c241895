"""The sandbox every process that runs a candidate starts in: bubblewrap.

A confined process sees a root of its own: the system's programs and libraries, the Python
runtime and the packages the candidate imports, kernelaudit's own code, and the candidate's
folder, all read-only; the one folder its job writes to (requests and results) and a cache
folder of its own (Triton's compiled kernels), read-write; a private /tmp. It sees nothing
else the auditor reads or writes: problem files, other candidates, reports, result databases,
other candidates' caches, the auditor's working directory. It runs in namespaces of its own:
process ids (everything it starts dies with it, and it can signal no process outside), user
(the auditor's own uid, with no capability, and where bubblewrap can forbid it, no user
namespace of its own to get them back), network (none), IPC and hostname. GPU device
nodes are passed through.

Where bubblewrap is missing or cannot start (no user namespaces, a container without the
rights to mount), candidates run as plain processes, and every report says so (`Isolation`):
the terminal, the JSON report, and `--strict`, which then exits 1.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import os
import shutil
import site
import socket
import stat
import subprocess
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import kernelaudit
from kernelaudit.runner.auditor.limits import FolderBound, folder_held, machine_memory

BUBBLEWRAP = "bwrap"

SANDBOX_SWITCH = "KERNELAUDIT_SANDBOX"
"""Set to "off" to run candidates without the sandbox (reported as such in every audit)."""

SANDBOX_HOME = "/home/user"
"""Where a confined process finds its home: its candidate's own cache folder, mounted there."""

_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt", "/sys")
"""Read-only system folders: programs, libraries, the dynamic linker's configuration, drivers'
information under /sys. /opt is where some Python and CUDA installations live."""

_DEVICES = ("/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*")
"""GPU device nodes passed through."""

_TRIAL_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class Isolation:
    """How candidates' processes are confined on this machine.

    kind: "bubblewrap", or "none" when they run as plain processes.
    reason: why they are not confined ("" when they are), or, confined, what this bubblewrap
        cannot forbid them ("" when nothing).
    """

    kind: str
    reason: str = ""

    @property
    def confined(self) -> bool:
        return self.kind == "bubblewrap"

    def describe(self) -> str:
        if self.confined:
            said = "bubblewrap: private file system, process ids, user and network"
            return f"{said}; {self.reason}" if self.reason else said
        return f"none ({self.reason})"


@functools.cache
def isolation() -> Isolation:
    """Whether bubblewrap can confine a process here: found, and a trial run succeeds."""
    if os.environ.get(SANDBOX_SWITCH, "").lower() == "off":
        return Isolation("none", f"{SANDBOX_SWITCH}=off was set")
    executable = shutil.which(BUBBLEWRAP)
    if executable is None:
        return Isolation(
            "none",
            "bubblewrap (bwrap) is not installed; install it (apt-get install bubblewrap, "
            "dnf install bubblewrap) so candidates cannot reach the auditor's files or processes",
        )
    if _forbids_user_namespaces(executable):
        return Isolation("bubblewrap")  # its trial ran a confined process, stricter than this
    trial = confine([sys.executable, "-c", "pass"], executable=executable, forbid_nested=False)
    try:
        done = subprocess.run(
            trial, capture_output=True, timeout=_TRIAL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return Isolation("none", f"bubblewrap could not start: {error}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        why = said[-1] if said else f"exit code {done.returncode}"
        return Isolation(
            "none",
            f"bubblewrap cannot create its namespaces here ({why}); allow unprivileged user "
            "namespaces (sysctl kernel.unprivileged_userns_clone=1) or run outside a "
            "container that forbids them",
        )
    return Isolation("bubblewrap", NESTED_ALLOWED)


NESTED_ALLOWED = (
    "user namespaces of their own allowed (bubblewrap older than 0.8, installed setuid, or "
    "refusing --disable-userns here): a process a candidate starts in one is not held to its "
    "memory limit"
)


def confine(
    command: Sequence[str],
    *,
    readable: Iterable[str | Path] = (),
    writable: Iterable[str | Path] = (),
    mounted: Iterable[tuple[str | Path, str | Path]] = (),
    workdir: str | Path | None = None,
    executable: str | None = None,
    forbid_nested: bool | None = None,
) -> list[str]:
    """`command` wrapped to run under bubblewrap: `readable` folders or files bound read-only,
    `writable` ones read-write (at the same paths), each (folder, place) of `mounted`
    read-write at `place`, the Python runtime and kernelaudit read-only, nothing else of the
    host's files. It starts in `workdir` (default: /tmp). User namespaces of its own are
    forbidden where this bubblewrap can forbid them (`forbid_nested` None), or as it says."""
    wrapper = executable or shutil.which(BUBBLEWRAP) or BUBBLEWRAP
    if forbid_nested is None:
        forbid_nested = _forbids_user_namespaces(wrapper)
    arguments = [
        wrapper,
        "--unshare-all",  # user, process ids, network, IPC, hostname, cgroup
        *(_NO_NESTED_USER_NAMESPACES if forbid_nested else ()),
        "--die-with-parent",
        # the auditor's own ids, as a plain program of this user has them: a fixed uid
        # (nobody's) would tell a candidate it runs confined; every capability dropped, which
        # bubblewrap otherwise keeps for a uid-0 sandbox started by root
        "--uid",
        str(os.getuid()),
        "--gid",
        str(os.getgid()),
        "--cap-drop",
        "ALL",
        "--hostname",  # the host's own: a plain program sees it, so it tells nothing
        socket.gethostname() or "localhost",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        *_scratch(wrapper, "/tmp"),
        *_scratch(wrapper, "/dev/shm"),
    ]
    for folder in _SYSTEM:
        arguments += _bind_system(folder)
    for pattern in _DEVICES:
        for node in sorted(glob.glob(pattern)):
            arguments += ["--dev-bind-try", node, node]
    for path in _runtime_paths():
        arguments += ["--ro-bind-try", path, path]
    for path in readable:
        arguments += ["--ro-bind", str(path), str(path)]
    for path in writable:
        arguments += ["--bind", str(path), str(path)]
    for path, place in mounted:
        arguments += ["--bind", str(path), str(place)]
    arguments += ["--chdir", str(workdir or "/tmp"), "--"]
    return arguments + list(command)


def scratch_bytes() -> int:
    """The size of each of a confined process's private memory-backed folders (/tmp and
    /dev/shm): a sixteenth of the host's memory, at most 4 GiB. They are memory (tmpfs) that
    no worker's memory limit counts: unbounded, a candidate filling them would take the host's
    memory from the auditor and every other candidate."""
    return max(64 << 20, min(4 << 30, machine_memory() // 16))


def _scratch(wrapper: str, folder: str) -> list[str]:
    """A private tmpfs at `folder`, of `scratch_bytes` where this bubblewrap can size one."""
    sized = ["--size", str(scratch_bytes())] if _sizes_tmpfs(wrapper) else []
    return [*sized, "--tmpfs", folder]


@functools.cache
def _sizes_tmpfs(wrapper: str) -> bool:
    """Whether this bubblewrap takes `--size` for a tmpfs: 0.7 and later do, unless installed
    setuid (where it refuses the option, and every confined start would fail)."""
    return _takes(wrapper, "--size")


_NO_NESTED_USER_NAMESPACES = ("--unshare-user", "--disable-userns")
"""A user namespace of the sandbox's own that allows no more of them. Inside a user namespace
of its own a process has every capability back, so it could start processes in a process-id
namespace of their own: the worker's memory limit counts the sandbox's process-id namespace,
not those."""


@functools.cache
def _forbids_user_namespaces(wrapper: str) -> bool:
    """Whether this bubblewrap can keep a confined process from making user namespaces of its
    own (`--disable-userns`: 0.8 and later, unless installed setuid) here: a trial run of a
    confined process with it says, since a user namespace is not available everywhere
    bubblewrap runs (as root, say)."""
    if not _takes(wrapper, "--disable-userns"):
        return False
    trial = confine([sys.executable, "-c", "pass"], executable=wrapper, forbid_nested=True)
    try:
        done = subprocess.run(
            trial, capture_output=True, timeout=_TRIAL_TIMEOUT_S, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


@functools.cache
def _takes(wrapper: str, option: str) -> bool:
    """Whether this bubblewrap takes `option`: its help lists it, and it is not installed
    setuid (which refuses the options that need privileges bubblewrap does not keep)."""
    try:
        if os.stat(shutil.which(wrapper) or wrapper).st_mode & stat.S_ISUID:
            return False
        said = subprocess.run(
            [wrapper, "--help"], capture_output=True, timeout=_TRIAL_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return option.encode() in said.stdout + said.stderr


def _bind_system(folder: str) -> list[str]:
    """A system folder bound read-only, or re-created as the symbolic link it is (a merged
    /usr makes /bin, /lib and /sbin links into it)."""
    if os.path.islink(folder):
        return ["--symlink", os.readlink(folder), folder]
    return ["--ro-bind-try", folder, folder]


@functools.cache
def _runtime_paths() -> tuple[str, ...]:
    """The Python runtime and the folders its packages are imported from (the interpreter's
    prefixes and every folder on sys.path but the working directory), the folder kernelaudit
    is imported from, and the bytecode cache where it is kept apart from the sources."""
    here = os.path.realpath(os.getcwd())
    package_root = str(Path(kernelaudit.__file__).resolve().parent.parent)
    found: dict[str, None] = {}
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path):
        if not path or not os.path.isdir(path):
            continue
        real = os.path.realpath(path)
        if real == here or real in ("/", "/tmp"):
            continue
        found[path] = None
        found[real] = None
    executable = os.path.realpath(sys.executable)
    found[str(Path(executable).parent)] = None
    if sys.pycache_prefix and os.path.isdir(sys.pycache_prefix):
        # bytecode kept apart from the sources (PYTHONPYCACHEPREFIX): read, never written
        found[sys.pycache_prefix] = None
    if package_root not in found:
        # a source checkout: its src/ holds kernelaudit alone, never the auditor's data
        found[str(Path(package_root) / "kernelaudit")] = None
    return tuple(found)


def for_candidate(
    command: Sequence[str],
    env: dict[str, str],
    candidate: str | Path,
    *,
    scratch: str | Path | None = None,
    readable: Iterable[str | Path] = (),
) -> tuple[list[str], dict[str, str]]:
    """The command and environment of a process that runs `candidate`: confined where this
    machine allows (`isolation`), seeing the candidate's folder and `readable` read-only, and
    writing only `scratch` (its job's requests and results) and its own cache folder."""
    if not isolation().confined:
        return list(command), env
    cache = candidate_cache(candidate)
    folders = [Path(candidate).resolve().parent, *readable]
    writable = [] if scratch is None else [scratch]
    # the cache is the confined process's home, at a path that names no auditor
    home = (cache, SANDBOX_HOME)
    confined = confine(
        command, readable=folders, writable=writable, mounted=[home], workdir=scratch
    )
    return confined, {**env, **cache_environment(Path(SANDBOX_HOME))}


def candidate_cache(path: str | Path) -> Path:
    """A cache folder of the candidate's own (Triton's compiled kernels), kept between its
    audits and written by no other candidate: named for the candidate file's path and bytes."""
    source = Path(path).resolve()
    digest = hashlib.sha256(str(source).encode())
    if source.is_file():
        digest.update(source.read_bytes())
    base = os.environ.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    folder = Path(base) / "kernelaudit" / "candidates" / digest.hexdigest()[:24]
    folder.mkdir(parents=True, exist_ok=True)
    return folder


_BOUNDS: dict[Path, FolderBound] = {}


def cache_bound(candidate: str | Path) -> FolderBound | None:
    """What the candidate's cache folder may hold, where it is the only folder on the host's
    disk its processes write (under the sandbox); None without the sandbox, where they write
    wherever the auditor's user can. One per folder, shared by every wait on its processes."""
    if not isolation().confined:
        return None
    folder = candidate_cache(candidate)
    if folder not in _BOUNDS:
        _BOUNDS[folder] = FolderBound(folder)
    return _BOUNDS[folder]


JOB_FOLDER_SLACK = 64 << 20
"""What a one-shot child may write to its job folder besides its result: files of its own a
candidate writes where it runs (its working folder)."""


def job_bound(folder: str | Path, result_bytes: int) -> FolderBound | None:
    """What a one-shot child's job folder (its working folder, the one folder besides its cache
    that its processes write under the sandbox, in the host's temporary folder) may hold: what
    the auditor put there before it started (its request), the result it may write
    (`result_bytes`, the bound its reader holds it to) and `JOB_FOLDER_SLACK`. None without the
    sandbox, where its processes write wherever the auditor's user can."""
    if not isolation().confined:
        return None
    given, _ = folder_held(os.fspath(folder), 1 << 62, 1 << 62)
    most = given + result_bytes + JOB_FOLDER_SLACK
    return FolderBound(folder, most, "its job's folder", emptied=False)


def cache_environment(home: Path) -> dict[str, str]:
    """The variables that make `home` a candidate process's home, its caches in the places
    their tools use by default."""
    return {
        # packages installed for the user stay importable once HOME moves
        "PYTHONUSERBASE": site.getuserbase(),
        "HOME": str(home),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "TRITON_CACHE_DIR": str(home / ".triton" / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(home / ".cache" / "torchinductor"),
        "TMPDIR": "/tmp",
    }
