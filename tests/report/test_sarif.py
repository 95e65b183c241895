"""The SARIF report as a code-scanning tool reads it: SARIF 2.1.0's required structure, one
result per finding tied to a source line, at that line, and nothing for the others."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from kernelaudit.findings import AuditReport, Finding
from kernelaudit.report.sarif import write_sarif

REQUIRED = {
    "type": "object",
    "required": ["$schema", "version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string", "pattern": "sarif-schema-2\\.1\\.0\\.json$"},
        "runs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object",
                        "required": ["driver"],
                        "properties": {
                            "driver": {
                                "type": "object",
                                "required": ["name", "version", "rules"],
                                "properties": {
                                    "name": {"const": "kernelaudit"},
                                    "rules": {
                                        "type": "array",
                                        "items": {
                                            "type": "object",
                                            "required": ["id", "shortDescription"],
                                        },
                                    },
                                },
                            }
                        },
                    },
                    "results": {"type": "array", "items": {"$ref": "#/$defs/result"}},
                },
            },
        },
    },
    "$defs": {
        "result": {
            "type": "object",
            "required": ["ruleId", "ruleIndex", "level", "message", "locations"],
            "properties": {
                "level": {"enum": ["error", "warning", "note"]},
                "message": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {"text": {"type": "string", "minLength": 1}},
                },
                "locations": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/at"}},
            },
        },
        "at": {
            "type": "object",
            "required": ["physicalLocation"],
            "properties": {
                "physicalLocation": {
                    "type": "object",
                    "required": ["artifactLocation", "region"],
                    "properties": {
                        "artifactLocation": {
                            "type": "object",
                            "required": ["uri"],
                            "properties": {"uri": {"type": "string", "minLength": 1}},
                        },
                        "region": {
                            "type": "object",
                            "required": ["startLine"],
                            "properties": {"startLine": {"type": "integer", "minimum": 1}},
                        },
                    },
                }
            },
        },
    },
}
"""What SARIF 2.1.0 requires of a log, and what code scanning needs of each result."""


def written(reports: list[AuditReport], path: Path, root: Path | None = None) -> dict[str, Any]:
    write_sarif(reports, path, root)
    document: dict[str, Any] = json.loads(path.read_text())
    errors = [e.message for e in Draft202012Validator(REQUIRED).iter_errors(document)]
    assert errors == []
    return document


def line_of(path: Path, text: str) -> int:
    (number,) = [n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line]
    return number


def at(result: dict[str, Any]) -> tuple[str, int]:
    place = result["locations"][0]["physicalLocation"]
    return place["artifactLocation"]["uri"], place["region"]["startLine"]


@pytest.mark.slow
def test_a_tripwire_and_an_out_of_bounds_store_are_results_at_their_lines(
    located: AuditReport, tmp_path: Path
) -> None:
    kernels = Path(located.candidate_path)
    (run,) = written([located], tmp_path / "audit.sarif", root=kernels.parent)["runs"]
    assert run["tool"]["driver"]["version"] == dict(located.environment)["kernelaudit"]
    results = {r["ruleId"]: r for r in run["results"]}
    assert set(results) == {"triton-bounds", "tripwires/timer-patching"}
    store, timer = results["triton-bounds"], results["tripwires/timer-patching"]
    assert store["level"] == "error" and timer["level"] == "warning"
    assert at(store) == ("scale_kernels.py", line_of(kernels, "mask=offsets < n + STORE_EXTRA"))
    assert at(timer) == ("scale_kernels.py", line_of(kernels, "time.perf_counter = lambda"))
    assert "writes 1 element past the end of y_ptr" in store["message"]["text"]
    assert (
        store["locations"][0]["physicalLocation"]["artifactLocation"]["uriBaseId"]
        in run["originalUriBaseIds"]
    )
    rules = run["tool"]["driver"]["rules"]
    for result in run["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    assert "Patching a clock" in rules[timer["ruleIndex"]]["fullDescription"]["text"]
    assert run["properties"]["findings_without_a_source_line"] == 0


@pytest.mark.slow
def test_files_outside_the_working_folder_are_named_by_file_uri(
    located: AuditReport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # elsewhere than the candidate's folder
    (run,) = written([located], tmp_path / "audit.sarif")["runs"]
    uris = {at(result)[0] for result in run["results"]}
    assert uris == {Path(located.candidate_path).resolve().as_uri()}
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == tmp_path.resolve().as_uri() + "/"


def test_a_sanitizer_error_is_at_the_line_it_names_and_a_finding_without_one_is_left_out(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    kernels = tmp_path / "kernels" / "transpose.cu"
    kernels.parent.mkdir()
    kernels.write_text("// a kernel\n")
    candidate = tmp_path / "kernels" / "candidate.py"
    found = [
        finding(
            "sanitizer",
            "fail",
            "memcheck: out-of-bounds global write",
            {"where": f"{candidate}:19"},
        ),
        # named by its file's name alone: looked for beside the candidate
        finding("sanitizer", "fail", "memcheck: misaligned read", {"where": "transpose.cu:41"}),
        finding("sanitizer", "fail", "racecheck: shared race", {"where": "elsewhere.cu:7"}),
        finding("sanitizer", "note", "memcheck on 1 case(s) took 3 s", {}),
        finding("numerics", "fail", "y: normwise error 0.02 is 20x the baseline's", {}),
    ]
    audited = report(*found, candidate_path=str(candidate))
    (run,) = written([audited], tmp_path / "audit.sarif", root=tmp_path)["runs"]
    assert [(at(r), r["level"]) for r in run["results"]] == [
        (("kernels/candidate.py", 19), "error"),
        (("kernels/transpose.cu", 41), "error"),
    ]
    assert [rule["id"] for rule in run["tool"]["driver"]["rules"]] == ["sanitizer"]
    assert run["properties"]["findings_without_a_source_line"] == 3


def test_a_triton_kernel_seen_at_several_lines_is_reported_at_the_first(
    tmp_path: Path, report: Callable[..., AuditReport], finding: Callable[..., Finding]
) -> None:
    kernels = tmp_path / "softmax.py"
    kernels.write_text("# kernels\n")
    lines = {"source": ["softmax.py:28", "softmax.py:31"]}
    reading = finding("triton-bounds", "warn", "kernel _rows reads through x_ptr into y_ptr", lines)
    audited = report(reading, candidate_path=str(kernels))
    (result,) = written([audited], tmp_path / "audit.sarif", root=tmp_path)["runs"][0]["results"]
    assert at(result) == ("softmax.py", 28) and result["level"] == "warning"
    (related,) = result["relatedLocations"]
    assert related["physicalLocation"]["region"]["startLine"] == 31
