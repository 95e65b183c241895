"""The reference's training runs kept on disk, for the next audit of any candidate of a problem.

The training check's experiment trains the reference, its one-ulp perturbations and their
shadows (`experiment._reference_runs`) before it can judge a candidate: on a GPU the larger
part of the check, and the same runs for every candidate of a problem. One process already
shares them between the candidates it audits; these files share them between processes: the
next `kernelaudit check` of the problem (a developer auditing a kernel again after a fix, a
pipeline auditing each candidate with a command of its own), a corpus slot, the demo run again.

A set is kept in the cache (`formats.cache.cache_root`) under `training/`, in a folder named
by a digest of everything the runs depend on (`name_for`): the problem's files as they were
when it was loaded (`Problem.source_files`, with the helpers its reference has imported from
its folder since), the slot, the dtype configuration, the slot's
dtypes, the experiment and its token batches, the device's model, the precision and
determinism flags, the versions of torch, CUDA and cuDNN, and kernelaudit's own code. A
candidate's file is none of these, so a candidate changed and audited again finds the set its
problem's first audit kept. Nothing is kept or read for a problem built in code, or by a
process whose kernelaudit sources, problem files or helper modules changed on disk after it
loaded them (the code it runs is then not what the files say). Only a whole set in
which every run trained to its end is kept: a run that stopped (the device out of memory, say)
is made again by the next audit. Keeping is never worth an audit: whatever fails while a set
is named, read or written leaves the runs to be made (and says why they were not kept).

Only the auditor writes them: the cache is outside every candidate's sandbox. Each set's
tensors are written to a file named by their digest, its manifest through a temporary file
renamed over the old one, and the manifest is sealed with the auditor's key (`report.seal`):
a set whose seal does not hold, or whose tensors are not those the manifest names, is not
read, and the runs are made again (docs/threat-model.md). What the folder holds is bounded
(`MOST_BYTES`), the sets used least lately given up first.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import platform
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import kernelaudit
from kernelaudit.formats.cache import cache_root
from kernelaudit.problem.load import loaded_from
from kernelaudit.problem.spec import Problem
from kernelaudit.report.seal import check, seal, write_atomically
from kernelaudit.runner.boundary.state import FLAG_NAMES, snapshot
from kernelaudit.training.loop import Experiment, Trajectory
from kernelaudit.training.shadow import Shadowed

FORMAT = 2
"""The layout of a kept set; part of its name, so a set of another layout is never read."""
MOST_BYTES = 8 << 30
"""What the kept sets may hold on disk together (a set of the GPU's experiment is about 0.6 GB
a dtype configuration; the CPU's, a few MB)."""
STALE_S = 600.0
"""A file a set's writing left behind (its tensors without a manifest, a temporary file) is
given up once it is this old: another audit may be writing it now."""
MANIFEST = "manifest.json"
"""A set's sealed manifest; its tensors are in the file it names (`runs-<digest>.pt`)."""
_TENSORS = re.compile(r"runs-([0-9a-f]{16})\.pt")

Envelope = tuple[Trajectory, list[Trajectory], list[Shadowed]]
"""The reference's run, the perturbed runs and the perturbed runs' shadows of one optimizer."""

_code_digest: str | None = None


def folder() -> Path:
    """Where the sets are kept: the cache's `training/` folder."""
    return cache_root() / "training"


def name_for(
    problem: Problem,
    config: int,
    dtypes: Sequence[torch.dtype | None],
    experiment: Experiment,
    tokens: torch.Tensor,
    device: str,
) -> str:
    """The digest a set of the reference's runs is kept under; "" where none may be kept: a
    problem built in code, its files or kernelaudit's sources changed since this process
    loaded them, or anything that could not be read."""
    if not problem.source_files:
        return ""
    try:
        code = _code()
        files = _files(problem)
        if not code or not files:
            return ""
        parts = [
            f"format {FORMAT}",
            code,
            *(f"{path} {digest}" for path, digest in files),
            problem.slot,
            str(config),
            repr(tuple(dtypes)),
            json.dumps(asdict(experiment), sort_keys=True),
            hashlib.sha256(tokens.detach().cpu().contiguous().numpy().tobytes()).hexdigest(),
            _device_model(device),
            *(f"{k}={v}" for k, v in snapshot(torch.device("cpu")).values if k in FLAG_NAMES),
            f"NVIDIA_TF32_OVERRIDE={os.environ.get('NVIDIA_TF32_OVERRIDE', '')}",
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, cuDNN {_cudnn()}",
        ]
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part.encode(errors="surrogateescape"))
            digest.update(b"\0")
    except Exception:  # nothing kept is worth failing the audit for
        return ""
    return digest.hexdigest()[:32]


def _files(problem: Problem) -> tuple[tuple[str, str], ...]:
    """The problem's files as it was loaded, with the modules its reference has imported from
    its folder since (inside a function, say); none where one of them has changed since."""
    now = dict(loaded_from(Path(problem.source)))
    if not now:
        return ()
    then = dict(problem.source_files)
    if any(now.get(path, digest) != digest for path, digest in then.items()):
        return ()
    return tuple(sorted({**now, **then}.items()))


def load(name: str) -> dict[str, Envelope] | None:
    """The set kept under `name`, or None where there is none, or none whose seal holds and
    whose tensors are those sealed."""
    if not name:
        return None
    try:
        place = folder() / name
        manifest = json.loads((place / MANIFEST).read_text())
        sealed = manifest.pop("seal", None)
        if check(manifest, sealed) != "intact" or manifest.get("name") != name:
            return None
        found = _TENSORS.fullmatch(manifest["tensors"])
        if found is None or found.group(1) != manifest["tensors_sha256"][:16]:
            return None
        data = (place / manifest["tensors"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != manifest["tensors_sha256"]:
            return None
        # read only once its bytes are known to be those the auditor sealed
        tensors = torch.load(io.BytesIO(data), weights_only=True)
        runs = {
            optimizer: (
                _trajectory(entry["reference"], tensors),
                [_trajectory(t, tensors) for t in entry["perturbed"]],
                [_shadowed(s, tensors) for s in entry["shadows"]],
            )
            for optimizer, entry in manifest["optimizers"].items()
        }
    except Exception:  # unreadable, or not a set: made again
        return None
    with contextlib.suppress(OSError):
        os.utime(place / MANIFEST)  # used lately: the last to be given up
    return runs


def keep(name: str, runs: Mapping[str, Envelope]) -> str:
    """Keep `runs` under `name`; "" once kept, else why not (a run of them stopped before its
    end, no name, the cache could not be written)."""
    if not name:
        return (
            "no name could be made for them (a problem built in code, its files or kernelaudit "
            "changed since they were loaded, or a file that could not be read)"
        )
    if any(run.error for envelope in runs.values() for run in _all(envelope)):
        return "a run of them stopped before its end"
    temporary = ""
    try:
        place = folder() / name
        tensors: dict[str, torch.Tensor] = {}
        optimizers = {
            optimizer: {
                "reference": _entry(f"{optimizer}/reference", reference, tensors),
                "perturbed": [
                    _entry(f"{optimizer}/perturbed/{i}", t, tensors)
                    for i, t in enumerate(perturbed)
                ],
                "shadows": [
                    _entry(f"{optimizer}/shadows/{i}", s, tensors) for i, s in enumerate(shadows)
                ],
            }
            for optimizer, (reference, perturbed, shadows) in runs.items()
        }
        place.mkdir(parents=True, exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(prefix=".runs-", dir=place)
        with os.fdopen(descriptor, "wb") as handle:
            torch.save(tensors, handle)
        digest = _sha256(Path(temporary))
        manifest: dict[str, Any] = {
            "format": FORMAT,
            "name": name,
            "tensors": f"runs-{digest[:16]}.pt",
            "tensors_sha256": digest,
            "kept": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "optimizers": optimizers,
        }
        os.replace(temporary, place / manifest["tensors"])
        temporary = str(place / manifest["tensors"])  # given up if the manifest is not written
        write_atomically(place / MANIFEST, json.dumps({**manifest, "seal": seal(manifest)}))
        temporary = ""
        _tidy(place, manifest["tensors"])
        _bound(folder(), MOST_BYTES)
        if not (place / MANIFEST).is_file():
            return f"larger than the cache's bound of {MOST_BYTES >> 30} GiB for kept runs"
    except Exception as error:
        return f"the cache could not be written: {type(error).__name__}: {error}"
    finally:
        if temporary:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
    return ""


def place_of(name: str) -> str:
    """The folder the set named `name` is kept in (delete it to have the runs made again)."""
    try:
        return str(folder() / name)
    except Exception:  # no home to find the cache in
        return name


def _all(envelope: Envelope) -> list[Trajectory | Shadowed]:
    reference, perturbed, shadows = envelope
    return [reference, *perturbed, *shadows]


def _entry(
    prefix: str, run: Trajectory | Shadowed, tensors: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """`run`'s entry in the manifest; its tensors (a trajectory's losses and parameters, a
    shadow's drift) put in `tensors` under `prefix`."""
    if isinstance(run, Trajectory):
        named = run.parameters
        # losses as a tensor: the seal's JSON holds no NaN, and a diverging run may have one
        tensors[f"{prefix}/losses"] = torch.tensor(run.losses, dtype=torch.float64)
    else:
        named = run.drift
    for key, value in named.items():
        tensors[f"{prefix}/named/{key}"] = value
    return {
        "at": prefix,
        "optimizer": run.optimizer,
        "named": list(named),
        "slot_calls": run.slot_calls,
    }


def _named(entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {key: tensors[f"{entry['at']}/named/{key}"] for key in entry["named"]}


def _trajectory(entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Trajectory:
    return Trajectory(
        optimizer=entry["optimizer"],
        losses=tuple(tensors[f"{entry['at']}/losses"].tolist()),
        parameters=_named(entry, tensors),
        slot_calls=int(entry["slot_calls"]),
    )


def _shadowed(entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Shadowed:
    return Shadowed(entry["optimizer"], _named(entry, tensors), int(entry["slot_calls"]))


def _code() -> str:
    """A digest of kernelaudit's own source files, so that a change to how runs are made (the
    model, the loop, the oracle's rounding) makes them again; "" where a file changed after
    this process imported kernelaudit (what it runs is then not what the files say)."""
    global _code_digest
    package = Path(kernelaudit.__file__).parent
    files = sorted(package.rglob("*.py"))
    if any(path.stat().st_mtime > kernelaudit.IMPORTED_AT for path in files):
        return ""
    if _code_digest is None:
        digest = hashlib.sha256()
        for path in files:
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
        _code_digest = digest.hexdigest()
    return _code_digest


def _device_model(device: str) -> str:
    """The device the runs train on: a GPU's model, or a CPU's model and instruction set."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    model = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return f"{device} {model} {torch.backends.cpu.get_cpu_capability()}"


def _cudnn() -> int | None:
    return torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest()


def _tidy(place: Path, current: str) -> None:
    """Give up what sets kept here before left (not what another audit may be writing now)."""
    now = time.time()
    for path in [*place.glob("runs-*.pt"), *place.glob(".runs-*")]:
        with contextlib.suppress(OSError):
            if path.name != current and now - path.stat().st_mtime > STALE_S:
                path.unlink()


def _bound(root: Path, most: int) -> None:
    """Give up whole sets, used least lately first, until the folder holds at most `most`; a
    folder without a manifest counts as used when it was last changed."""
    sets = []
    for place in root.iterdir():
        with contextlib.suppress(OSError):
            size = sum(p.stat().st_size for p in place.iterdir())
            marker = place / MANIFEST if (place / MANIFEST).is_file() else place
            sets.append((marker.stat().st_mtime, size, str(place)))
    total = sum(size for _, size, _ in sets)
    for _, size, place in sorted(sets):
        if total <= most:
            break
        for path in Path(place).iterdir():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            Path(place).rmdir()
        total -= size
