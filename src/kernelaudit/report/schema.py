"""The JSON report's schema, `report.schema.json` (JSON Schema draft 2020-12, shipped with the
package): what other tools may rely on in a kernelaudit-report/1 file, and the check that a
document holds to it, naming the place where it does not. docs/report-schema.md says
what every field means and which changes give the format a new version."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError, best_match

from kernelaudit.errors import UsageError
from kernelaudit.findings import REPORT_FORMAT

SCHEMA_FILE = "report.schema.json"
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class InvalidReport(UsageError):
    """A report document that does not hold to the schema. `where` is the JSON path of the
    problem ("$.reports[0].verdict")."""

    def __init__(self, where: str, problem: str) -> None:
        self.where = where
        super().__init__(
            f"{where}: {problem}; a {REPORT_FORMAT} document is described field by field in "
            "docs/report-schema.md (the schema: kernelaudit/report/report.schema.json)"
        )


def report_schema() -> dict[str, Any]:
    """The schema as shipped with the package."""
    schema: dict[str, Any] = json.loads(
        resources.files("kernelaudit.report").joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    )
    return schema


def validate_document(data: Any) -> None:
    """Raise InvalidReport naming where `data`, a report file as parsed JSON (what
    `write_reports` writes), does not hold to the schema; of several such places, the one
    nearest the top of the document."""
    _check(data, _validator(""))


def validate_report(data: Any) -> None:
    """The same for one report alone: a report as `report_document` gives it, as a corpus
    stores it or a pipe carries it."""
    _check(data, _validator("#/$defs/report"))


@functools.cache
def _validator(part: str) -> Draft202012Validator:
    """A validator of the whole document, or of the part of it the reference `part` names."""
    schema = report_schema()
    if part:
        schema = {"$schema": schema["$schema"], "$defs": schema["$defs"], "$ref": part}
    return Draft202012Validator(schema)


def _check(data: Any, validator: Draft202012Validator) -> None:
    written = data.get("format") if isinstance(data, dict) else None
    if isinstance(written, str) and written != REPORT_FORMAT:
        raise InvalidReport(
            "$.format",
            f"is {written!r}, and this kernelaudit reads {REPORT_FORMAT!r}: read the file with "
            "the kernelaudit that wrote it",
        )
    error = best_match(validator.iter_errors(data))
    if error is not None:
        where, problem = _described(error)
        raise InvalidReport(where, problem)


def _described(error: ValidationError) -> tuple[str, str]:
    """Where the error is and what is wrong there, in words; a missing field is named by its
    own path."""
    path = list(error.absolute_path)
    if error.validator == "required" and isinstance(error.instance, dict):
        missing = [name for name in error.validator_value if name not in error.instance]
        return _json_path([*path, missing[0]]), "is missing, and the format requires it there"
    said = error.message
    description = error.schema.get("description") if isinstance(error.schema, dict) else None
    if description:
        said += f" (it holds: {description.rstrip('.')})"
    return _json_path(path), said


def _json_path(parts: Iterable[str | int]) -> str:
    """'$.reports[0].findings[2].evidence["worst rows"]' from the parts of a path."""
    text = "$"
    for part in parts:
        if isinstance(part, int):
            text += f"[{part}]"
        elif _NAME.fullmatch(part):
            text += f".{part}"
        else:
            text += f"[{json.dumps(part)}]"
    return text
