"""The bundled examples: each folder under `examples/` holds `problem.py`, its candidates, and
`expected.json` saying which candidates must pass and which must fail, and through which check."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from kernelaudit.errors import UsageError
from kernelaudit.findings import AuditReport


@dataclass(frozen=True)
class ExampleCandidate:
    problem: Path
    candidate: str
    """A "path/file.py::function" spec."""
    verdict: str
    check: str
    """For an expected FAIL: the check whose finding names the bug."""

    def met_by(self, report: AuditReport) -> bool:
        if report.verdict != self.verdict:
            return False
        return self.verdict == "PASS" or any(f.check == self.check for f in report.failures)


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
    examples = []
    for manifest in sorted(root.glob("*/expected.json")):
        try:
            entries = json.loads(manifest.read_text())["candidates"]
            for entry in entries:
                examples.append(
                    ExampleCandidate(
                        problem=manifest.parent / "problem.py",
                        candidate=str(manifest.parent / entry["candidate"]),
                        verdict=entry["verdict"],
                        check=entry.get("check", ""),
                    )
                )
        except (KeyError, TypeError, json.JSONDecodeError) as error:
            raise UsageError(
                f"{manifest}: malformed example manifest ({error}); it must be "
                '{"candidates": [{"candidate": "file.py::fn", "verdict": "PASS"}, '
                "...]}"
            ) from None
    if not examples:
        raise UsageError(f"no examples in {root}: expected folders holding expected.json")
    return examples
