"""The reference's training runs kept on disk, for the next audit of any candidate of a problem.

The training check's experiment trains the reference, its one-ulp perturbations and their
shadows (`experiment._reference_runs`) before it can judge a candidate: on a GPU the larger
part of the check, and the same runs for every candidate of a problem. One process already
shares them between the candidates it audits; these files share them between processes: the
next `kernelaudit check` of the problem (a developer auditing a kernel again after a fix, a
pipeline auditing each candidate with a command of its own), a corpus slot, the demo run again.

A set is kept in the cache (`formats.cache.cache_root`) under `training/`, in a folder named
by a digest of everything the runs depend on (`name_for`): the bytes of the problem's file and
of every module the auditor loaded from its folder, the slot, the dtype configuration, the
experiment, the device's model, the versions of torch and CUDA, and kernelaudit's own code. A
candidate's file is none of these, so a candidate changed and audited again finds the set its
problem's first audit kept. Only a whole set in which every run trained to its end is kept: a
run that stopped (the device out of memory, say) is made again by the next audit.

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
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

import kernelaudit
from kernelaudit.formats.cache import cache_root
from kernelaudit.problem.spec import Problem
from kernelaudit.report.seal import check, seal, write_atomically
from kernelaudit.training.loop import Experiment, Trajectory
from kernelaudit.training.shadow import Shadowed

FORMAT = 1
MOST_BYTES = 8 << 30
"""What the kept sets may hold on disk together (a set of the GPU's experiment is about 0.6 GB
a dtype configuration; the CPU's, a few MB)."""
_MANIFEST = "manifest.json"

Envelope = tuple[Trajectory, list[Trajectory], list[Shadowed]]
"""The reference's run, the perturbed runs and the perturbed runs' shadows of one optimizer."""

_code_digest: str | None = None


def folder() -> Path:
    """Where the sets are kept: the cache's `training/` folder."""
    return cache_root() / "training"


def name_for(problem: Problem, slot: str, config: int, experiment: Experiment, device: str) -> str:
    """The digest a set of reference runs is kept under; "" for a problem built in code (no
    file whose bytes say what its reference is)."""
    if not problem.source or not Path(problem.source).is_file():
        return ""
    digest = hashlib.sha256()
    for part in (
        f"format {FORMAT}",
        _code(),
        *_problem_files(Path(problem.source)),
        slot,
        str(config),
        json.dumps(asdict(experiment), sort_keys=True),
        _device_model(device),
        f"torch {torch.__version__}, CUDA {torch.version.cuda}",
    ):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:32]


def load(name: str) -> dict[str, Envelope] | None:
    """The set kept under `name`, or None where there is none, or none whose seal holds and
    whose tensors are those sealed."""
    if not name:
        return None
    place = folder() / name
    try:
        manifest = json.loads((place / _MANIFEST).read_text())
        sealed = manifest.pop("seal", None)
        if check(manifest, sealed) != "intact" or manifest.get("name") != name:
            return None
        data = (place / manifest["tensors"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != manifest["tensors_sha256"]:
            return None
        tensors = torch.load(io.BytesIO(data), weights_only=True)
        runs = {
            optimizer: (
                _trajectory(kept["reference"], tensors),
                [_trajectory(t, tensors) for t in kept["perturbed"]],
                [_shadowed(s, tensors) for s in kept["shadows"]],
            )
            for optimizer, kept in manifest["optimizers"].items()
        }
    except (OSError, ValueError, KeyError, TypeError, RuntimeError, EOFError):
        return None
    with contextlib.suppress(OSError):
        os.utime(place / _MANIFEST)  # used lately: the last to be given up
    return runs


def keep(name: str, runs: Mapping[str, Envelope]) -> bool:
    """Keep `runs` under `name` (nothing where a run of them stopped before its end, or the
    cache cannot be written); whether they were kept."""
    if not name or any(run.error for envelope in runs.values() for run in _all(envelope)):
        return False
    tensors: dict[str, torch.Tensor] = {}
    optimizers = {
        optimizer: {
            "reference": _trajectory_entry(f"{optimizer}/reference", reference, tensors),
            "perturbed": [
                _trajectory_entry(f"{optimizer}/perturbed/{i}", t, tensors)
                for i, t in enumerate(perturbed)
            ],
            "shadows": [
                _shadowed_entry(f"{optimizer}/shadows/{i}", s, tensors)
                for i, s in enumerate(shadows)
            ],
        }
        for optimizer, (reference, perturbed, shadows) in runs.items()
    }
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    place = folder() / name
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "name": name,
        "tensors": f"runs-{digest[:16]}.pt",
        "tensors_sha256": digest,
        "kept": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "optimizers": optimizers,
    }
    try:
        place.mkdir(parents=True, exist_ok=True)
        write_atomically(place / manifest["tensors"], data)
        write_atomically(place / _MANIFEST, json.dumps({**manifest, "seal": seal(manifest)}))
        _tidy(place, manifest["tensors"])
        _bound(folder(), MOST_BYTES)
    except OSError:
        return False
    return True


def _all(envelope: Envelope) -> list[Trajectory | Shadowed]:
    reference, perturbed, shadows = envelope
    return [reference, *perturbed, *shadows]


def _trajectory_entry(
    prefix: str, run: Trajectory, tensors: dict[str, torch.Tensor]
) -> dict[str, Any]:
    # losses as a tensor: the seal's JSON holds no NaN, and a diverging run may have one
    tensors[f"{prefix}/losses"] = torch.tensor(run.losses, dtype=torch.float64)
    for parameter, value in run.parameters.items():
        tensors[f"{prefix}/parameters/{parameter}"] = value
    return {
        "at": prefix,
        "optimizer": run.optimizer,
        "parameters": list(run.parameters),
        "slot_calls": run.slot_calls,
    }


def _shadowed_entry(prefix: str, run: Shadowed, tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    for parameter, value in run.drift.items():
        tensors[f"{prefix}/drift/{parameter}"] = value
    return {
        "at": prefix,
        "optimizer": run.optimizer,
        "drift": list(run.drift),
        "slot_calls": run.slot_calls,
    }


def _trajectory(entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Trajectory:
    prefix = entry["at"]
    return Trajectory(
        optimizer=entry["optimizer"],
        losses=tuple(tensors[f"{prefix}/losses"].tolist()),
        parameters={p: tensors[f"{prefix}/parameters/{p}"] for p in entry["parameters"]},
        slot_calls=int(entry["slot_calls"]),
    )


def _shadowed(entry: dict[str, Any], tensors: dict[str, torch.Tensor]) -> Shadowed:
    prefix = entry["at"]
    return Shadowed(
        optimizer=entry["optimizer"],
        drift={p: tensors[f"{prefix}/drift/{p}"] for p in entry["drift"]},
        slot_calls=int(entry["slot_calls"]),
    )


def _code() -> str:
    """A digest of kernelaudit's own source files: a change to how runs are made (the model,
    the loop, the oracle's rounding) makes them again."""
    global _code_digest
    if _code_digest is None:
        digest = hashlib.sha256()
        package = Path(kernelaudit.__file__).parent
        for path in sorted(package.rglob("*.py")):
            digest.update(str(path.relative_to(package)).encode())
            digest.update(path.read_bytes())
        _code_digest = digest.hexdigest()
    return _code_digest


def _problem_files(source: Path) -> list[str]:
    """The problem's file and every module loaded from its folder (helpers its reference
    imports), each as its name and the digest of its bytes."""
    home = source.resolve().parent
    files = {source.resolve()}
    for module in list(sys.modules.values()):
        location = getattr(module, "__file__", None)
        if not location:
            continue
        path = Path(location).resolve()
        if path.suffix == ".py" and path.is_relative_to(home) and path.is_file():
            files.add(path)
    return [
        f"{path.relative_to(home)} {hashlib.sha256(path.read_bytes()).hexdigest()}"
        for path in sorted(files)
    ]


def _device_model(device: str) -> str:
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    capability = torch.backends.cpu.get_cpu_capability()
    return f"{device} {platform.machine()} {capability}"


def _tidy(place: Path, current: str, grace_s: float = 600.0) -> None:
    """Give up the tensors of sets kept here before (not those of one another audit may be
    writing now)."""
    now = time.time()
    for path in place.glob("runs-*.pt"):
        with contextlib.suppress(OSError):
            if path.name != current and now - path.stat().st_mtime > grace_s:
                path.unlink()


def _bound(root: Path, most: int) -> None:
    """Give up whole sets, used least lately first, until the folder holds at most `most`."""
    sets = []
    for place in root.iterdir():
        with contextlib.suppress(OSError):
            size = sum(p.stat().st_size for p in place.iterdir())
            sets.append(((place / _MANIFEST).stat().st_mtime, size, place))
    total = sum(size for _, size, _ in sets)
    for _, size, place in sorted(sets):
        if total <= most:
            break
        for path in place.iterdir():
            with contextlib.suppress(OSError):
                path.unlink()
        with contextlib.suppress(OSError):
            place.rmdir()
        total -= size
