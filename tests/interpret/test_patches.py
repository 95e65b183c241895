"""Triton's interpreter's patching made once (`interpret.patches`): kernels that call
`@triton.jit` functions from inside (the language's own and their own) give the same bits, the
language is left as the interpreter leaves it, and neither the listing of the builtins nor the
patching is made again at every device call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton.runtime.interpreter")

_KERNELS = textwrap.dedent(
    """
    import inspect
    import sys

    import torch
    import triton
    import triton.language as tl

    from kernelaudit.interpret import patches

    @triton.jit
    def _scaled(x, factor):
        return x * factor

    @triton.jit
    def _row_stats(x_ptr, mean_ptr, out_ptr, n, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        offsets = tl.arange(0, BLOCK)
        inside = offsets < n
        x = tl.load(x_ptr + row * n + offsets, mask=inside, other=0.0)
        mean = tl.sum(x, axis=0) / n
        top = tl.max(tl.where(inside, x, -float("inf")), axis=0)
        tl.store(mean_ptr + row, mean)
        y = _scaled(x - mean, 1.0 / top).to(tl.float16).to(tl.float32)
        tl.store(out_ptr + row * n + offsets, tl.cdiv(n, 7) + y, mask=inside)

    def run() -> list[bytes]:
        torch.manual_seed(0)
        x = torch.rand(9, 50) + 0.5
        mean, out = torch.empty(9), torch.empty(9, 50)
        _row_stats[(9,)](x, mean, out, 50, BLOCK=64)
        return [t.numpy().tobytes() for t in (mean, out)]

    def wrapped_names() -> dict[str, list[str]]:
        # which of the language's attributes are the interpreter's wrappers after a launch
        places = {"tl": tl, "core": tl.core, "tensor": tl.tensor, "math": tl.math}
        return {
            label: sorted(
                name for name, member in inspect.getmembers(place)
                if patches.wrapped(member) is not None
            )
            for label, place in places.items()
        }

    from triton.runtime import interpreter

    listings = []
    listed = inspect.getmembers
    cores = []
    core = interpreter._patch_lang_core

    def counting_cores(*args, **kwargs):
        cores.append(args[0])
        return core(*args, **kwargs)

    interpreter._patch_lang_core = counting_cores

    def counting(*args, **kwargs):
        listings.append(args[0])
        return listed(*args, **kwargs)

    inspect.getmembers = counting
    plain = run()
    listed_plain, cored_plain = len(listings), len(cores)
    plain_again = run()
    inspect.getmembers = listed
    left_plain = wrapped_names()
    assert patches.install() and not patches.install()
    inspect.getmembers = counting
    listings.clear()
    cores.clear()
    first = run()
    listed_first, cored_first = len(listings), len(cores)
    second = run()
    inspect.getmembers = listed
    assert plain == plain_again == first == second, "the bits differ"
    assert wrapped_names() == left_plain, "the language is left otherwise"
    # 9 programs, 3 device calls each: the interpreter lists the packages at every one of them,
    # and once installed the listing is made once per package
    assert listed_plain > 27 and len(listings) == listed_first <= 5, (listed_plain, listings)
    # and patches once per launch for each set of the language's modules a device call sees
    # (the kernel's own `tl`, the language library's `tl` and `core`), not at every device call
    assert cored_plain >= 28 and cored_first < 9 and len(cores) == 2 * cored_first, (
        cored_plain,
        cores,
    )
    print("same")
    """
)


def _interpreted(script: str) -> subprocess.CompletedProcess[str]:
    # the package where this test finds it (installed, or on PYTHONPATH)
    env = {
        "TRITON_INTERPRET": "1",
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )


def test_kernels_with_device_calls_give_the_same_bits_and_leave_the_language_as_it_was() -> None:
    ran = _interpreted(_KERNELS)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split()[-1] == "same"


def test_nothing_is_installed_where_kernels_are_not_interpreted() -> None:
    script = textwrap.dedent(
        """
        import os
        import triton.runtime.interpreter as interpreter
        from kernelaudit.interpret import patches
        before = interpreter._patch_builtin
        os.environ.pop("TRITON_INTERPRET", None)
        print(patches.install(), interpreter._patch_builtin is before)
        """
    )
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == ["False", "True"]
