"""CUDA source held in Python strings: a tripwire in it points at the file line the construct is
on, whatever the literal is made of (escapes, line splices, implicit concatenation, f-string
fields over several lines)."""

from __future__ import annotations

from pathlib import Path

from kernelaudit.tripwires import scan_candidate
from tripwires.scanning import expect, found, write


def test_escapes_and_splices_keep_each_line(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        r"""
        import cupy

        _SOURCE = (
            "extern \"C\" __global__ void k(float* y) {\n"
            "    // \N{GREEK SMALL LETTER MU}s, \x41, \u00e9 and a form feed \f are one char each\n"
            "    long long a = 0; \
        long long t = clock64();\n"  # the splice joins two lines of this file
            r"    if (y[0] < 0) { abort(); }" "\n"
            "}\n"
        )


        def candidate(x):
            return cupy.RawKernel(_SOURCE, "k")
        """,
    )
    assert found(scan_candidate(path)) == expect(
        path,
        ("timer-patching", "long long t = clock64()"),
        ("process-control", "abort();"),
    )


def test_f_string_fields_over_several_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '''
        from torch.utils.cpp_extension import load_inline

        _BLOCK = 128
        _WIDTH = 8
        _SOURCE = f"""
        __global__ void k(float* y) {{
            __shared__ float tile[{
                _BLOCK
            }]; long long t = clock64();
            y[0] = tile[0] + {_BLOCK!r:>{
                _WIDTH
            }
            } + (float)t;
            if (y[0] < 0) {{ abort(); }}
        }}
        """


        def candidate(x):
            return load_inline(name="k", cpp_sources="", cuda_sources=_SOURCE)
        ''',
    )
    assert found(scan_candidate(path)) == expect(
        path,
        ("timer-patching", "long long t = clock64()"),
        ("process-control", "abort();"),
    )
