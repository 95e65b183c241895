"""C, C++ and CUDA sources as a parser reads them: calls hidden behind raw strings, comments
continued over a line splice, macro bodies, state kept in device variables and statics, and a
clear error when the parser is missing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelaudit.errors import UsageError
from kernelaudit.tripwires import c_source, scan_candidate
from tripwires.scanning import expect, found, write

_CANDIDATE = """
from torch.utils.cpp_extension import load

_module = load(name="kernel", sources=["kernel.cu"])
"""


def _scanned(folder: Path, cuda: str) -> tuple[Path, set[tuple[str, int]]]:
    """The kernel file written beside a candidate that compiles it, and what the scan says."""
    kernel = write(folder, cuda, name="kernel.cu")
    return kernel, found(scan_candidate(write(folder, _CANDIDATE)))


def test_literals_and_comments_hide_nothing_and_show_nothing(tmp_path: Path) -> None:
    kernel, seen = _scanned(
        tmp_path,
        r"""
        #include <cstdlib>

        void host(int flag) {
            auto note = R"x( " /* )x"; if (flag) exit(1); // */
            auto text = R"(abort() and exit(2) are words here)";
            const char quote = u8'"'; if (flag > 1) abort();
            // a comment continued by a splice \
            std::exit(3);
            printf("exit(4)");
        }
        """,
    )
    assert seen == expect(
        kernel,
        ("process-control", "if (flag) exit(1)"),
        ("process-control", "if (flag > 1) abort()"),
    )


def test_macro_bodies_are_read_as_code(tmp_path: Path) -> None:
    kernel, seen = _scanned(
        tmp_path,
        """
        #define NOW() clock64()  // exit(1) would be a call, were it not in a comment
        #define MESSAGE "abort()"
        #define TIMER(t) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t))

        __global__ void timed(long long* t) { t[0] = NOW(); }
        """,
    )
    assert seen == expect(
        kernel, ("timer-patching", "#define NOW()"), ("timer-patching", "#define TIMER")
    )


def test_state_kept_between_calls(tmp_path: Path) -> None:
    kernel, seen = _scanned(
        tmp_path,
        """
        static __device__ int hits;
        __device__ __managed__ int shared_count;
        extern "C" { __device__ int in_c; }
        namespace detail { __device__ float scratch[4]; }
        __device__ const int kLimit = 4;
        __constant__ float kTable[2] = {0.0f, 1.0f};
        __device__ float twice(float v);
        static int helper_calls_at_file_scope;

        struct Counter {
            static int instances;
        };

        __global__ void k(float* y) {
            __shared__ float tile[32];
            static constexpr int kBlock = 32;
            auto bump = [] { static int lambda_calls = 0; return ++lambda_calls; };
            y[0] = tile[0] + bump() + kBlock;
        }
        """,
    )
    assert seen == expect(
        kernel,
        ("module-state", "static __device__ int hits"),
        ("module-state", "__managed__ int shared_count"),
        ("module-state", "__device__ int in_c"),
        ("module-state", "__device__ float scratch"),
        ("module-state", "static int lambda_calls"),
    )


def test_host_clocks_processes_and_files(tmp_path: Path) -> None:
    kernel, seen = _scanned(
        tmp_path,
        """
        #include <chrono>
        #include <fstream>
        #include <unistd.h>

        void host(float* y) {
            auto now = std::chrono::steady_clock::now();
            long stamp = time(NULL);
            int me = getpid();
            std::ifstream marker("/tmp/seen");
            FILE* log = fopen("/tmp/calls", "a");
        }
        """,
    )
    assert seen == expect(
        kernel,
        ("clock-trigger", "steady_clock::now()"),
        ("clock-trigger", "time(NULL)"),
        ("process-trigger", "getpid()"),
        ("file-trigger", "std::ifstream"),
        ("file-trigger", "fopen("),
    )


@pytest.fixture
def no_grammar(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """tree-sitter's CUDA grammar made impossible to import, for this test only."""
    monkeypatch.setitem(sys.modules, "tree_sitter_cuda", None)
    c_source._grammar.cache_clear()
    yield
    c_source._grammar.cache_clear()


@pytest.mark.usefixtures("no_grammar")
def test_a_missing_parser_is_a_usage_error_that_names_the_fix(tmp_path: Path) -> None:
    write(tmp_path, "__global__ void k() {}\n", name="kernel.cu")
    with pytest.raises(UsageError, match=r"pip install .*tree-sitter-cuda"):
        scan_candidate(write(tmp_path, _CANDIDATE))
