"""compute-sanitizer's text reports, read from captured output of each tool (fixtures/*.txt)."""

from __future__ import annotations

from pathlib import Path

from kernelaudit.sanitizer.report import Output, location, parse

FIXTURES = Path(__file__).parent / "fixtures"


def _parsed(name: str) -> Output:
    return parse((FIXTURES / f"{name}.txt").read_text(), name.split("_")[0])


def test_an_out_of_bounds_triton_store_is_read_with_kernel_access_size_address_and_thread() -> None:
    output = _parsed("memcheck_triton_oob")
    assert output.complete and output.errors == 2 and not output.problems
    assert len(output.reports) == 2
    first = output.reports[0]
    assert (first.tool, first.kind, first.severity) == ("memcheck", "invalid access", "error")
    assert (first.kernel, first.space, first.access, first.size) == (
        "_oob_store",
        "global",
        "write",
        4,
    )
    assert first.where.endswith("oob_store.py:19")
    assert first.address == "0x7f2c3a102e04"
    assert first.verdict == (
        "is out of bounds and is 0 bytes after the nearest allocation at 0x7f2c3a102600 of size "
        "2,052 bytes"
    )
    assert (first.thread, first.block) == ("(1,0,0)", "(2,0,0)")
    # the host backtrace stays with the report it belongs to, and opens no report of its own
    assert any("__triton_launcher.so" in line for line in first.lines)
    assert output.reports[1].address == "0x7f2c3a103e04"


def test_the_older_location_format_puts_the_kernel_after_the_file_and_line() -> None:
    (report,) = _parsed("memcheck_old_format").reports
    assert report.kernel == "_oob_store"
    assert report.where.endswith("oob_store.py:19")
    assert report.verdict == "is out of bounds"
    assert report.block == "(4,0,0)"


def test_templated_kernels_keep_their_whole_names_and_every_access_kind_is_read() -> None:
    reports = _parsed("memcheck_templates").reports
    assert [(r.kind, r.space, r.access, r.size) for r in reports] == [
        ("invalid access", "shared", "read", 16),
        ("invalid access", "global", "atomic", 4),
        ("invalid access", "local", "write", 8),
        ("other", "", "", None),
        ("invalid access", "global", "read", 16),
    ]
    assert reports[0].kernel == "void tiled_transpose<float, (int)32>(const T1 *, T1 *, int, int)"
    assert reports[0].where == "transpose.cu:41"
    assert reports[1].verdict == "is misaligned"
    assert reports[2].kernel == "(anonymous namespace)::scratch_kernel(double *, int)"
    assert reports[2].where == ""
    assert reports[3].headline == "Warp Illegal Address"
    assert reports[3].kernel.startswith("void gather_rows<__half>(")
    assert reports[4].kernel.startswith("void at::native::vectorized_elementwise_kernel<4, ")
    assert reports[4].verdict.endswith("of size 4,080 bytes")


def test_initcheck_reports_uninitialised_reads() -> None:
    output = _parsed("initcheck_reads")
    assert output.errors == 2
    first = output.reports[0]
    assert (first.kind, first.space, first.access, first.size) == (
        "uninitialized access",
        "global",
        "read",
        4,
    )
    assert (first.kernel, first.address, first.verdict) == (
        "_accumulate_rows",
        "0x7f90c2000100",
        "",
    )


def test_synccheck_reports_a_barrier_error_with_its_classification() -> None:
    (report,) = _parsed("synccheck_divergent").reports
    assert report.kind == "barrier error"
    assert report.headline == "Barrier error detected. Divergent thread(s) in block"
    assert report.kernel == "block_reduce(const float *, float *, int)"
    assert (report.thread, report.block) == ("(96,0,0)", "(12,0,0)")


def test_racecheck_races_carry_their_level_accesses_and_hazard_counts() -> None:
    output = _parsed("racecheck_analysis")
    assert (output.errors, output.warnings) == (1, 1)
    error, warning = output.reports
    assert (error.kind, error.severity, error.access, error.hazards) == (
        "race",
        "error",
        "write/read",
        256,
    )
    assert (error.kernel, error.where, error.space) == ("_softmax_rows", "softmax.py:28", "shared")
    assert (warning.severity, warning.access, warning.hazards) == ("warning", "write", 32)
    assert warning.kernel == "void warp_sum<float>(float *, int)"


def test_racecheck_hazard_reports_name_the_hazard_the_address_and_the_first_thread() -> None:
    (report,) = _parsed("racecheck_hazard").reports
    assert (report.kind, report.severity, report.access) == ("hazard", "error", "WAW")
    assert (report.space, report.address, report.block) == ("shared", "0x0", "(0,0,0)")
    assert (report.kernel, report.thread) == ("_reduce_kernel", "(0,0,0)")


def test_output_cut_short_keeps_its_reports_and_says_it_has_no_summary() -> None:
    output = _parsed("memcheck_cut_short")
    assert not output.complete and output.errors is None
    assert [r.kernel for r in output.reports] == ["_gather_kernel", "_gather_kernel"]
    assert output.reports[1].address == ""  # the second report was cut before its address


def test_errors_past_the_print_limit_are_counted_not_lost() -> None:
    output = _parsed("memcheck_print_limit")
    assert (output.errors, output.unprinted, len(output.reports)) == (1042, 1040, 2)
    assert "1,241,911,296 bytes before" in output.reports[0].verdict


def test_the_tools_own_failures_are_problems_not_reports() -> None:
    output = _parsed("tool_errors")
    assert output.reports == ()
    assert output.errors == 0
    assert output.problems[0].startswith("Error: Device not supported")
    assert output.problems[1].startswith("Internal Sanitizer Error")
    assert output.problems[2] == "Target application returned an error"


def test_the_programs_own_output_is_ignored_and_api_errors_name_no_kernel() -> None:
    output = _parsed("initcheck_library_only")
    assert [r.kind for r in output.reports] == [
        "uninitialized access",
        "uninitialized access",
        "api error",
    ]
    assert output.reports[2].kernel == ""
    assert output.problems == ()
    assert not any("tensor(" in line for r in output.reports for line in r.lines)


def test_a_custom_prefix_is_honoured() -> None:
    text = (FIXTURES / "synccheck_divergent.txt").read_text().replace("=========", "##")
    assert len(parse(text, "synccheck", prefix="##").reports) == 1
    assert parse(text, "synccheck").reports == ()


def test_location_lines_of_every_version() -> None:
    assert location("_oob_store+0x1f0 in oob_store.py:19") == ("_oob_store", "oob_store.py:19")
    assert location("unaligned_kernel():0x160 in memcheck_demo.cu:6") == (
        "unaligned_kernel()",
        "memcheck_demo.cu:6",
    )
    assert location("0xda0 in /srv/moe/fused_moe.py:175:fused_moe_kernel") == (
        "fused_moe_kernel",
        "/srv/moe/fused_moe.py:175",
    )
    assert location("0x3b0 in void bootstrap<unsigned long, (int)2048>(unsigned long *)") == (
        "void bootstrap<unsigned long, (int)2048>(unsigned long *)",
        "",
    )
    assert location("compress(const unsigned int *, uint2 *, int)+0x4bd0") == (
        "compress(const unsigned int *, uint2 *, int)",
        "",
    )
