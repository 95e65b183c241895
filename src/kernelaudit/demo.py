"""The bundled examples: each folder under `examples/` holds `problem.py`, its candidates, and
`expected.json` saying which candidates must pass and which must fail, and through which check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from kernelaudit.errors import UsageError

if TYPE_CHECKING:
    # not at run time: the corpus's job listing reads manifests before torch is imported
    from kernelaudit.findings import AuditReport


@dataclass(frozen=True)
class ExampleCandidate:
    problem: Path
    candidate: str
    """A "path/file.py::function" spec."""
    verdict: str
    checks: tuple[str, ...] = ()
    """For an expected FAIL: the checks that must each fail it, the first naming the bug."""

    def met_by(self, report: AuditReport) -> bool:
        if report.verdict != self.verdict:
            return False
        failed = {f.check for f in report.failures}
        return self.verdict == "PASS" or all(check in failed for check in self.checks)


def find_examples(root: Path | None = None) -> Path:
    """The examples folder: `root` if given, else the repository's `examples/` next to this
    package's source, else `./examples`."""
    candidates = (
        [root]
        if root
        else [Path(__file__).resolve().parents[2] / "examples", Path.cwd() / "examples"]
    )
    for folder in candidates:
        if folder is not None and folder.is_dir():
            return folder
    raise UsageError(
        "cannot find the bundled examples folder; run from a kernelaudit checkout "
        "(installed with `pip install -e .`) or pass --examples DIR"
    )


def load_examples(root: Path) -> list[ExampleCandidate]:
    examples = [e for manifest in sorted(root.glob("*/expected.json")) for e in read(manifest)]
    if not examples:
        raise UsageError(f"no examples in {root}: expected folders holding expected.json")
    return examples


def read(manifest: Path) -> list[ExampleCandidate]:
    """The candidates one example's `expected.json` lists, with what each must do."""
    try:
        return [
            ExampleCandidate(
                problem=manifest.parent / "problem.py",
                candidate=str(manifest.parent / entry["candidate"]),
                verdict=entry["verdict"],
                checks=_checks(entry.get("check", [])),
            )
            for entry in json.loads(manifest.read_text())["candidates"]
        ]
    except (KeyError, TypeError, json.JSONDecodeError) as error:
        raise UsageError(
            f"{manifest}: malformed example manifest ({error}); it must be "
            '{"candidates": [{"candidate": "file.py::fn", "verdict": "PASS"}, '
            '{"candidate": "file.py::other", "verdict": "FAIL", "check": "numerics"}, '
            "...]}, where a FAIL's check is one check's name or a list of them"
        ) from None


def _checks(named: object) -> tuple[str, ...]:
    """A manifest's "check": one check's name or a list of them."""
    names = [named] if isinstance(named, str) else named
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
        raise TypeError(f'"check" must be a check\'s name or a list of them, not {named!r}')
    return tuple(names)
