"""What a corpus run audits: (problem, candidate) jobs read from a manifest or a directory
layout, and each job's key, which changes whenever anything that decides its verdict does.

The run reads every job's problem and candidate files once, before any job starts, for the
keys, and records their sha256 in the jobs; each job is audited only if its files still hold
those bytes when its audit starts and when it ends (`changed_files`)."""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import kernelaudit
from kernelaudit.demo import read as read_example
from kernelaudit.errors import UsageError
from kernelaudit.inputs.scheme import SCHEME

PROBLEM_FILES = ("definition.json", "problem.py")
"""What makes a folder a problem: a SOL-ExecBench definition, or a native or KernelBench
problem module."""

CANDIDATE_FOLDERS = ("candidates", "solutions")

_FOLDER_PROBLEM_FILES = ("definition.json", "problem.py", "workload.jsonl")
"""The files of a problem given as a folder that its key covers."""

_KERNEL_DECORATORS = ("jit", "autotune", "heuristics", "kernel")
"""Decorators (their last name: `triton.jit`, `cute.kernel`, ...) that mark a function as a
device kernel, never the entry point a candidate file is called through."""

EXAMPLE_MANIFEST = "expected.json"
"""A bundled example's list of its candidates (`demo`): in a problem folder without a
candidates/ folder, the candidates it names are the folder's."""

_LAYOUT = (
    "each problem folder holds definition.json or problem.py, and a candidates/ (or "
    "solutions/) folder of .py and .json candidates, or an expected.json listing them as the "
    "bundled examples do; see docs/corpus.md"
)
_MANIFEST_ENTRY = '{"problem": "path/to/problem.py", "candidate": "path/to/kernel.py::function"}'


@dataclass(frozen=True)
class Job:
    """One audit to run.

    problem: the path of a problem file, or of a folder holding one (SOL-ExecBench).
    candidate: a candidate spec as the command line takes it: "path/file.py::function", the
        path of a SOL-ExecBench solution .json, or the path of a KernelBench .py defining
        `ModelNew`.
    problem_sha256, candidate_sha256: what the run read for the job's key (see `keyed`): the
        sha256 of the candidate file, and of the problem's files, each length-prefixed; None
        before. Not part of what the job is: two jobs naming the same files are the same job.
    """

    problem: str
    candidate: str
    problem_sha256: str | None = field(default=None, compare=False)
    candidate_sha256: str | None = field(default=None, compare=False)

    @property
    def candidate_file(self) -> Path:
        file, sep, _ = self.candidate.rpartition("::")
        return Path(file if sep else self.candidate)


def discover(source: Path, outputs: Collection[Path] = ()) -> list[Job]:
    """The jobs a manifest (.jsonl or .json) or a directory layout lists, in order.

    outputs: folders the run writes (its reports), never read as problem folders: a database
    kept inside the corpus it audits puts them there."""
    if source.is_dir():
        return read_layout(source, outputs)
    if source.is_file() and source.suffix in (".jsonl", ".json"):
        return read_manifest(source)
    if source.is_file():
        raise UsageError(
            f"{source} is neither a directory nor a manifest; pass a .jsonl file (one "
            f"{_MANIFEST_ENTRY} a line), a .json list of such objects, or a directory where "
            + _LAYOUT
        )
    raise UsageError(f"{source} does not exist; pass a corpus directory or a manifest file")


def corpus_root(source: Path) -> Path:
    """The folder job keys are relative to: a manifest's folder, or the corpus directory."""
    resolved = source.resolve()
    return resolved if resolved.is_dir() else resolved.parent


def keyed(
    jobs: Iterable[Job], profile: str, checks: list[str] | None, root: Path
) -> dict[str, Job]:
    """Each job under its key (the first of jobs sharing a key), in order, with the sha256 of
    its problem's and its candidate's files from the same read.

    The key is a sha256 over the problem's bytes (for a folder: its definition.json,
    workload.jsonl and problem.py), the candidate file's bytes, the candidate spec with its
    path relative to `root` (see `corpus_root`; absolute where the file lies outside it), the
    profile, the checks, kernelaudit's version and how it draws inputs (`inputs.scheme`):
    editing a candidate makes it a new job, and so does auditing it differently or on inputs
    drawn otherwise, but moving or copying the corpus folder does not."""
    problems: dict[Path, bytes] = {}
    chosen = "all" if checks is None else ",".join(sorted(set(checks)))
    result: dict[str, Job] = {}
    for job in jobs:
        problem = Path(job.problem)
        if problem not in problems:
            problems[problem] = _problem_bytes(problem)
        candidate = _read(job.candidate_file)
        digest = hashlib.sha256(b"kernelaudit-corpus-job/2")
        for part in (
            problems[problem],
            candidate,
            _portable(job.candidate, root).encode(),
            profile.encode(),
            chosen.encode(),
            kernelaudit.__version__.encode(),
            SCHEME.encode(),
        ):
            digest.update(_field(part))
        read = Job(
            job.problem,
            job.candidate,
            hashlib.sha256(problems[problem]).hexdigest(),
            hashlib.sha256(candidate).hexdigest(),
        )
        result.setdefault(digest.hexdigest(), read)
    return result


def as_read(job: Job) -> Job:
    """`job` with the sha256 of its problem's and its candidate's files as they are now: what
    `changed_files` compares them with later (`kernelaudit check` reads them before any
    candidate runs)."""
    return Job(
        job.problem,
        job.candidate,
        hashlib.sha256(_problem_bytes(Path(job.problem))).hexdigest(),
        hashlib.sha256(_read(job.candidate_file)).hexdigest(),
    )


def changed_files(job: Job) -> list[str]:
    """What changed in the job's files since the run read them for its key: a sentence for each
    file (the problem, the candidate) whose sha256 is no longer the one recorded in `job`."""
    changes = []
    for what, path, recorded, now in (
        ("problem", job.problem, job.problem_sha256, _problem_bytes(Path(job.problem))),
        ("candidate", str(job.candidate_file), job.candidate_sha256, _read(job.candidate_file)),
    ):
        digest = hashlib.sha256(now).hexdigest()
        if recorded is not None and digest != recorded:
            changes.append(
                f"the {what} {path} changed after the run read it (sha256 {recorded[:16]} "
                f"then, {digest[:16]} now)"
            )
    return changes


def _portable(spec: str, root: Path) -> str:
    """A candidate spec with its file's path relative to `root` when the file lies inside."""
    file, sep, function = spec.rpartition("::")
    path = Path(file if sep else spec)
    relative = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
    return f"{relative}::{function}" if sep else relative


def read_manifest(path: Path) -> list[Job]:
    """Jobs from a .jsonl manifest (one object a line) or a .json one (a list of objects),
    each {"problem": ..., "candidate": ...}; relative paths start from the manifest's folder."""
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"cannot read the manifest {path}: {error}") from None
    entries = _jsonl_entries(path, text) if path.suffix == ".jsonl" else _json_entries(path, text)
    jobs = [_manifest_job(path, line, entry) for line, entry in entries]
    if not jobs:
        raise UsageError(f"the manifest {path} lists no jobs; add entries like {_MANIFEST_ENTRY}")
    return jobs


def read_layout(root: Path, outputs: Collection[Path] = ()) -> list[Job]:
    """Jobs from a directory: ROOT/<name>/ folders each holding one problem and its candidates
    (or ROOT itself being one such folder); the folders in `outputs` are skipped."""
    skipped = {p.resolve() for p in outputs}
    folders = (
        [root]
        if _is_problem_folder(root)
        else sorted(
            p
            for p in root.iterdir()
            if p.is_dir() and not p.name.startswith((".", "_")) and p.resolve() not in skipped
        )
    )
    if not folders:
        raise UsageError(f"{root} holds no problem folders; {_LAYOUT}")
    jobs: list[Job] = []
    faults: list[str] = []
    for folder in folders:
        found, fault = _folder_jobs(folder)
        jobs += found
        faults += fault
    if faults:
        raise UsageError(
            f"{len(faults)} problem(s) in {root} cannot be read:\n  "
            + "\n  ".join(faults)
            + f"\n  fix: {_LAYOUT}; or list the jobs in a manifest"
        )
    return jobs


def _folder_jobs(folder: Path) -> tuple[list[Job], list[str]]:
    """The jobs of one problem folder, or what is wrong with it."""
    present = [folder / name for name in PROBLEM_FILES if (folder / name).is_file()]
    candidate_folders = [folder / n for n in CANDIDATE_FOLDERS if (folder / n).is_dir()]
    if not present:
        return [], [f"{folder}: no problem (definition.json or problem.py)"]
    if len(present) > 1:
        return [], [f"{folder}: both definition.json and problem.py; keep the one that is meant"]
    # a SOL-ExecBench problem is its folder (definition.json and workload.jsonl together)
    problem = str((folder if present[0].name == "definition.json" else present[0]).resolve())
    if not candidate_folders and (folder / EXAMPLE_MANIFEST).is_file():
        try:
            listed = read_example(folder / EXAMPLE_MANIFEST)
        except UsageError as error:
            return [], [str(error)]
        return [Job(problem, str(Path(e.candidate).resolve())) for e in listed], []
    if not candidate_folders:
        return [], [f"{folder}: no candidates/ or solutions/ folder (nor an {EXAMPLE_MANIFEST})"]
    files = sorted(
        f
        for candidates in candidate_folders
        for f in candidates.iterdir()
        if f.is_file() and f.suffix in (".py", ".json") and not f.name.startswith((".", "_"))
    )
    if not files:
        names = " or ".join(f"{c.name}/" for c in candidate_folders)
        return [], [f"{folder}: {names} holds no .py or .json candidate"]
    jobs, faults = [], []
    for file in files:
        try:
            jobs.append(Job(problem, _candidate_spec(file.resolve())))
        except UsageError as error:
            faults.append(str(error))
    return jobs, faults


def _candidate_spec(file: Path) -> str:
    """The spec of a candidate file: a .json solution or a .py defining `ModelNew` stands for
    itself; any other .py must define exactly one public function (kernels aside)."""
    if file.suffix == ".json":
        return str(file)
    try:
        tree = ast.parse(file.read_bytes(), filename=str(file))
    except SyntaxError as error:
        raise UsageError(f"{file}:{error.lineno}: not valid Python ({error.msg})") from None
    if any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return str(file)
    functions = [
        node.name
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and not node.name.startswith("_")
        and not any(_decorator_name(d) in _KERNEL_DECORATORS for d in node.decorator_list)
    ]
    if len(functions) == 1:
        return f"{file}::{functions[0]}"
    found = f"defines {', '.join(functions)}" if functions else "defines no public function"
    raise UsageError(
        f"{file}: {found}; a candidate .py must define `class ModelNew` or exactly one public "
        "top-level function (prefix helpers with _)"
    )


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    if isinstance(target, ast.Attribute):
        return target.attr
    return target.id if isinstance(target, ast.Name) else ""


def _is_problem_folder(folder: Path) -> bool:
    return any((folder / n).is_file() for n in PROBLEM_FILES) and any(
        (folder / n).is_dir() for n in CANDIDATE_FOLDERS
    )


def _jsonl_entries(path: Path, text: str) -> Iterator[tuple[int, object]]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(
                f"{path}:{number}: not JSON ({error.msg}); each line must be {_MANIFEST_ENTRY}"
            ) from None


def _json_entries(path: Path, text: str) -> Iterator[tuple[int, object]]:
    """The list's objects with the line each starts on, so an error can point at it."""
    decoder = json.JSONDecoder()
    position = _skip_space(text, 0)
    try:
        if text[position : position + 1] != "[":
            raise UsageError(f"{path}: not a JSON list; write [{_MANIFEST_ENTRY}, ...]")
        position = _skip_space(text, position + 1)
        while text[position : position + 1] != "]":
            entry, end = decoder.raw_decode(text, position)
            yield text.count("\n", 0, position) + 1, entry
            position = _skip_space(text, end)
            if text[position : position + 1] == ",":
                position = _skip_space(text, position + 1)
            elif text[position : position + 1] != "]":
                line = text.count("\n", 0, position) + 1
                raise UsageError(f"{path}:{line}: expected , or ] between the list's entries")
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}:{error.lineno}: not JSON ({error.msg})") from None


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


def _manifest_job(path: Path, line: int, entry: object) -> Job:
    where = f"{path}:{line}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: an entry must be an object like {_MANIFEST_ENTRY}")
    fields = {}
    for name in ("problem", "candidate"):
        value = entry.get(name)
        if not isinstance(value, str) or not value:
            raise UsageError(
                f"{where}: field {name!r} is missing or not a string; write {_MANIFEST_ENTRY}"
            )
        fields[name] = value
    base = path.resolve().parent
    problem = _resolved(base, fields["problem"])
    if not problem.exists():
        raise UsageError(
            f"{where}: field 'problem': {problem} does not exist; relative paths start from "
            f"the manifest's folder {base}"
        )
    file, sep, function = fields["candidate"].rpartition("::")
    candidate = _resolved(base, file if sep else fields["candidate"])
    if not candidate.is_file():
        raise UsageError(
            f"{where}: field 'candidate': there is no file {candidate}; relative paths start "
            f"from the manifest's folder {base}"
        )
    return Job(str(problem), f"{candidate}::{function}" if sep else str(candidate))


def _resolved(base: Path, text: str) -> Path:
    return (base / Path(text).expanduser()).resolve()


def _problem_bytes(path: Path) -> bytes:
    """A problem's files' bytes, each length-prefixed: the file, or the folder's
    definition.json, workload.jsonl and problem.py."""
    files = [path / name for name in _FOLDER_PROBLEM_FILES] if path.is_dir() else [path]
    return b"".join(_field(_read(file)) for file in files)


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        # a missing file makes its job fail when audited, with the reader's own message
        return b""


def _field(data: bytes) -> bytes:
    """A length-prefixed field, so that no two different tuples of fields hash alike."""
    return len(data).to_bytes(8, "big") + data
