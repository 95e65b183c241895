"""Reading compute-sanitizer's text reports.

Every line the tool writes starts with its prefix ("=========" unless changed). A report opens
with a headline one space after the prefix and continues with indented lines:

    ========= Invalid __global__ write of size 4 bytes
    =========     at _oob_store+0x1d0 in oob_store.py:21
    =========     by thread (0,0,0) in block (4,0,0)
    =========     Access at 0x7f3e2a000400 is out of bounds
    =========     and is 0 bytes after the nearest allocation at 0x7f3e29fff400 of size 4,096 bytes
    ...
    ========= ERROR SUMMARY: 1 error

Versions differ in the location line ("at kernel+0xPC in file:line", "at kernel():0xPC in
file:line", "at 0xPC in file:line:kernel"), in the address line ("Address 0x.. is out of
bounds", "Access to 0x.. is out of bounds") and in number formatting ("1,024"); all are read.
racecheck reports races ("ERROR: Race reported between Write access at ...") and ends with
"RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)"; the other tools end with
"ERROR SUMMARY: N errors". Output cut short has no summary line, which `Output.complete` tells.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

TOOLS = ("memcheck", "initcheck", "synccheck", "racecheck")

PREFIX = "========="


@dataclass(frozen=True)
class Report:
    """One error or warning the tool printed.

    kind: "invalid access" (memcheck), "uninitialized access" (initcheck), "barrier error"
        (synccheck), "race" and "hazard" (racecheck), "api error", "leak", or "other" (a
        hardware exception, a malloc/free error: `headline` says which).
    severity: "error", "warning" or "info" (racecheck's levels; every other report is an error).
    kernel: the kernel's name as printed (demangled), "" when the report names none.
    access: "read", "write", "atomic" (for a race: the accesses involved, "write/read").
    space: "global", "shared", "local" or "generic".
    verdict: what the address line says of the address ("is out of bounds and is 0 bytes after
        the nearest allocation at 0x7f3e29fff400 of size 4,096 bytes", "is misaligned").
    thread, block: "(x,y,z)" of the offending thread, when printed.
    hazards: for a race, how many byte-level hazards it sums up.
    lines: the report as printed, prefix removed.
    """

    tool: str
    kind: str
    headline: str
    severity: str = "error"
    kernel: str = ""
    where: str = ""
    access: str = ""
    space: str = ""
    size: int | None = None
    address: str = ""
    verdict: str = ""
    thread: str = ""
    block: str = ""
    hazards: int | None = None
    lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Output:
    """Everything one run of one tool printed.

    errors: the count on the summary line (racecheck: its errors); None when there is no
        summary line, that is when the output was cut short or the tool failed.
    unprinted: errors counted but not printed (past `--print-limit`).
    problems: the tool's own failures ("Error: Device not supported", an internal error).
    """

    tool: str
    reports: tuple[Report, ...] = ()
    errors: int | None = None
    warnings: int | None = None
    unprinted: int = 0
    problems: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return self.errors is not None


_NUMBER = r"\d[\d,]*"
_SPACE = r"__(?P<space>global|shared|local|generic)__"
_ACCESS_HEAD = re.compile(
    rf"^(?:Potential )?[Ii]nvalid (?:{_SPACE} )?(?P<access>\w+) of size (?P<size>{_NUMBER}) bytes?"
)
_UNINITIALIZED_HEAD = re.compile(
    rf"^Uninitiali[sz]ed {_SPACE} memory (?P<access>\w+) of size (?P<size>{_NUMBER}) bytes?"
)
_BARRIER_HEAD = re.compile(r"^(?:Barrier error|Warpgroup MMA sequence error) detected")
_RACE_HEAD = re.compile(
    r"^(?P<level>ERROR|WARNING|INFO): Race reported between (?P<access>\w+) access at (?P<at>.+)$"
)
_HAZARD_HEAD = re.compile(
    rf"^(?P<level>ERROR|WARNING|INFO): Potential (?P<type>\w+) hazard detected at {_SPACE} "
    r"(?P<address>0x[0-9a-fA-F]+) in block (?P<block>\([^)]*\))"
)
_API_HEAD = re.compile(r"^Program hit .* on CUDA API call to ")
_LEAK_HEAD = re.compile(rf"^Leaked (?P<size>{_NUMBER}) bytes at (?P<address>0x[0-9a-fA-F]+)")
_PROBLEM_HEAD = re.compile(
    r"^(?:Error:|Internal Sanitizer Error|.*\bnot supported\b|Target application "
    r"(?:terminated|returned an error)|No attachable process|Unable to )"
)
_ERROR_SUMMARY = re.compile(rf"^ERROR SUMMARY: (?P<count>{_NUMBER}) errors?\b(?P<rest>.*)$")
_RACE_SUMMARY = re.compile(
    rf"^RACECHECK SUMMARY: (?P<count>{_NUMBER}) hazards? displayed "
    rf"\((?P<errors>{_NUMBER}) errors?, (?P<warnings>{_NUMBER}) warnings?\)"
)

_AT = re.compile(r"^at (?P<at>.+)$")
_THREAD = re.compile(r"^by thread (?P<thread>\([^)]*\)) in block (?P<block>\([^)]*\))")
_ADDRESS = re.compile(
    r"^(?:Address|Access at|Access to) (?P<address>0x[0-9a-fA-F]+)\s*(?P<rest>.*)$"
)
_AND_IS = re.compile(r"^and is (?P<rest>.+)$")
_RACE_OTHER = re.compile(
    rf"^and (?P<access>\w+) access at (?P<at>.+?)(?: \[(?P<hazards>{_NUMBER}) hazards?\])?$"
)
_HAZARD_THREAD = re.compile(r"^(?P<access>Read|Write) Thread (?P<thread>\([^)]*\)) at (?P<at>.+)$")
_SIZE = re.compile(rf"of size (?P<size>{_NUMBER}) bytes?")
_CONTINUATION = re.compile(
    r"^(?:at |by thread |Address 0x|Access (?:at|to) 0x|and |Saved host backtrace|Host Frame"
    r"|Device Frame|in |(?:Read|Write) Thread |Current Value)"
)

_OLD_LOCATION = re.compile(r"^0x[0-9a-fA-F]+ in (?P<rest>.+)$")
_FILE_LINE_PREFIX = re.compile(r"^(?P<file>[^\s:()<>]+):(?P<line>\d+):(?P<name>.+)$")
_LOCATION = re.compile(r"^(?P<name>.+?)(?:\+|:)0x[0-9a-fA-F]+(?: in (?P<where>\S.*))?$")


def parse(text: str, tool: str, prefix: str = PREFIX) -> Output:
    """The reports, summary and tool failures in `text`, the output of one run of `tool`.
    Lines without the prefix (the program's own output, if it was mixed in) are ignored."""
    reports: list[Report] = []
    problems: list[str] = []
    current: Report | None = None
    errors: int | None = None
    warnings: int | None = None
    unprinted = 0

    def close() -> None:
        nonlocal current
        if current is not None:
            reports.append(current)
            current = None

    for raw in text.splitlines():
        if not raw.startswith(prefix):
            continue
        rest = raw[len(prefix) :].rstrip()
        line = rest.strip()
        if not line:
            close()
            continue
        if len(rest) - len(rest.lstrip(" ")) > 1:
            # an indented line belongs to the report above it (backtraces of a tool failure
            # belong to no report)
            if current is not None:
                current = _continued(current, line)
            continue
        summary = _ERROR_SUMMARY.match(line)
        if summary:
            close()
            count = _count(summary.group("count"))
            if "not printed" in summary.group("rest"):
                unprinted = count
            elif errors is None:
                errors = count
            continue
        race_summary = _RACE_SUMMARY.match(line)
        if race_summary:
            close()
            errors = _count(race_summary.group("errors"))
            warnings = _count(race_summary.group("warnings"))
            continue
        if _PROBLEM_HEAD.match(line) and not _API_HEAD.match(line):
            close()
            problems.append(line)
        elif current is not None and _CONTINUATION.match(line):
            current = _continued(current, line)  # a version that does not indent
        elif line != "COMPUTE-SANITIZER":
            close()
            current = _opened(line, tool)
    close()
    return Output(
        tool=tool,
        reports=tuple(reports),
        errors=errors,
        warnings=warnings,
        unprinted=unprinted,
        problems=tuple(problems),
    )


def _count(text: str) -> int:
    return int(text.replace(",", ""))


def _opened(line: str, tool: str) -> Report:
    """The report whose headline is `line`: kind "other" for a headline of no known form (a
    hardware exception such as "Warp Illegal Address", a malloc/free error, a warning)."""
    start = Report(tool=tool, kind="other", headline=line, lines=(line,))
    match = _ACCESS_HEAD.match(line)
    if match:
        return replace(
            start,
            kind="invalid access",
            access=match.group("access"),
            space=match.group("space") or "",
            size=_count(match.group("size")),
        )
    match = _UNINITIALIZED_HEAD.match(line)
    if match:
        return replace(
            start,
            kind="uninitialized access",
            access=match.group("access"),
            space=match.group("space"),
            size=_count(match.group("size")),
        )
    if _BARRIER_HEAD.match(line):
        return replace(start, kind="barrier error")
    match = _RACE_HEAD.match(line)
    if match:
        kernel, where = location(match.group("at"))
        return replace(
            start,
            kind="race",
            severity=match.group("level").lower(),
            access=match.group("access").lower(),
            space="shared",
            kernel=kernel,
            where=where,
        )
    match = _HAZARD_HEAD.match(line)
    if match:
        return replace(
            start,
            kind="hazard",
            severity=match.group("level").lower(),
            access=match.group("type"),
            space=match.group("space"),
            address=match.group("address"),
            block=match.group("block"),
        )
    if _API_HEAD.match(line):
        return replace(start, kind="api error")
    match = _LEAK_HEAD.match(line)
    if match:
        return replace(
            start, kind="leak", size=_count(match.group("size")), address=match.group("address")
        )
    size = _SIZE.search(line)
    return replace(start, size=_count(size.group("size"))) if size else start


def _continued(report: Report, line: str) -> Report:
    """`report` with one more of its lines read."""
    report = replace(report, lines=(*report.lines, line))
    match = _AT.match(line)
    if match and not report.kernel:
        kernel, where = location(match.group("at"))
        return replace(report, kernel=kernel, where=where)
    match = _THREAD.match(line)
    if match:
        if report.thread:
            return report
        return replace(report, thread=match.group("thread"), block=match.group("block"))
    match = _ADDRESS.match(line)
    if match:
        return replace(report, address=match.group("address"), verdict=match.group("rest"))
    match = _AND_IS.match(line)
    if match and report.verdict:
        return replace(report, verdict=f"{report.verdict} and is {match.group('rest')}")
    match = _RACE_OTHER.match(line)
    if match and report.kind == "race":
        hazards = match.group("hazards")
        seen = (*report.access.split("/"), match.group("access").lower())
        accesses = "/".join(dict.fromkeys(seen))
        return replace(
            report, access=accesses, hazards=_count(hazards) if hazards else report.hazards
        )
    match = _HAZARD_THREAD.match(line)
    if match and report.kind == "hazard":
        kernel, where = location(match.group("at"))
        return replace(
            report,
            kernel=report.kernel or kernel,
            where=report.where or where,
            thread=report.thread or match.group("thread"),
        )
    return report


def location(text: str) -> tuple[str, str]:
    """(kernel, "file:line") from what follows "at" on a location line; "file:line" is ""
    without line information."""
    text = text.strip()
    old = _OLD_LOCATION.match(text)
    if old:
        rest = old.group("rest")
        prefixed = _FILE_LINE_PREFIX.match(rest)
        if prefixed:
            return prefixed.group("name"), f"{prefixed.group('file')}:{prefixed.group('line')}"
        return rest, ""
    match = _LOCATION.match(text)
    if match:
        return match.group("name"), match.group("where") or ""
    return text, ""
