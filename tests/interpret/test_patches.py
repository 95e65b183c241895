"""Triton's interpreter's patching made once (`interpret.patches`): kernels that call
`@triton.jit` functions from inside (the language's own and their own) give the same bits and
fail the same way, the language is left as the interpreter leaves it, neither the listing of the
builtins nor the patching is made again at every device call, and an interpreter laid out
otherwise keeps its own patching."""

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
    from triton.runtime import interpreter

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

    @triton.jit
    def _fails_in_a_device_call(x_ptr, BLOCK: tl.constexpr):
        x = tl.load(x_ptr + tl.arange(0, BLOCK))
        tl.store(x_ptr + tl.arange(0, BLOCK), _scaled(x, tl.arange(0, BLOCK * 2)))

    @triton.jit
    def _larger(a, b):
        return tl.maximum(a, b)

    def outcome(call) -> str:
        try:
            return repr(call())
        except Exception as error:
            return f"{type(error).__name__}: {error}"

    def run() -> list[object]:
        torch.manual_seed(0)
        x = torch.rand(9, 50) + 0.5
        mean, out = torch.empty(9), torch.empty(9, 50)
        _row_stats[(9,)](x, mean, out, 50, BLOCK=64)
        try:  # shapes that do not broadcast, inside a device call
            _fails_in_a_device_call[(1,)](torch.zeros(16), BLOCK=16)
            failed = "nothing"
        except Exception as error:
            failed = f"{type(error).__name__}: {error}"
        _row_stats[(9,)](x, mean, out, 50, BLOCK=64)  # and a launch after the failed one
        # a jit function called from Python, outside any launch, after the launches
        direct = outcome(lambda: _larger(2.0, 3.0))
        return [t.numpy().tobytes() for t in (mean, out)] + [failed, direct]

    places = {
        "tl": tl, "core": tl.core, "tensor": tl.tensor, "math": tl.math, "dtype": tl.dtype,
        "condition": tl.condition, "descriptor": tl.core.tensor_descriptor_base,
    }
    pristine = {label: dict(vars(place)) for label, place in places.items()}

    def language_state() -> dict[str, dict[str, str]]:
        # each attribute of the language's modules and classes: as it was before any launch,
        # one of the interpreter's wrappers, or something else the interpreter put there
        def kind(label, name, value):
            if pristine[label].get(name, object()) is value:
                return "as it was"
            return "wrapper" if patches.wrapped(value) is not None else type(value).__name__

        return {
            label: {name: kind(label, name, value) for name, value in vars(place).items()}
            for label, place in places.items()
        }

    listings = []
    listed = inspect.getmembers
    cores = []
    core = interpreter._patch_lang_core

    def counting_listings(*args, **kwargs):
        listings.append(args[0])
        return listed(*args, **kwargs)

    def counting_cores(*args, **kwargs):
        cores.append(args[0])
        return core(*args, **kwargs)

    interpreter._patch_lang_core = counting_cores
    inspect.getmembers = counting_listings
    plain = run()
    listed_plain, cored_plain = len(listings), len(cores)
    plain_again = run()
    inspect.getmembers = listed
    left_plain = language_state()
    assert patches.install() and not patches.install()
    inspect.getmembers = counting_listings
    listings.clear()
    cores.clear()
    first = run()
    listed_first, cored_first = len(listings), len(cores)
    second = run()
    inspect.getmembers = listed
    assert plain[-2].startswith(("InterpreterError", "ValueError")), plain[-2]
    assert plain == plain_again == first == second, (plain[-2:], first[-2:])
    assert language_state() == left_plain, "the language is left otherwise"
    # 9 programs, 3 device calls each, twice a run: the interpreter lists the packages at every
    # one of them, and once installed each package's listing is made once (twice where a
    # launch's patches change how many attributes it has)
    assert listed_plain > 54 and len(listings) == listed_first <= 10, (listed_plain, listings)
    # and patches once per launch for each set of the language's modules a device call sees
    # (the kernel's own `tl`, the language library's `tl` and `core`), not at every device call
    assert cored_plain >= 54 and cored_first < 18 and len(cores) == 2 * cored_first, (
        cored_plain,
        cores,
    )
    print("same")
    """
)

_DIRECT_AFTER_A_LAUNCH = textwrap.dedent(
    """
    import sys

    import torch
    import triton
    import triton.language as tl

    from kernelaudit.interpret import patches

    @triton.jit
    def _larger(a, b):
        return tl.maximum(a, b)

    @triton.jit
    def _clamped(x_ptr):
        tl.store(x_ptr, _larger(tl.load(x_ptr), 1.0))

    if sys.argv[1] == "installed":
        assert patches.install()
    x = torch.zeros(1)
    _clamped[(1,)](x)
    # a jit function called from Python after the launch's end put the language back
    try:
        print(repr(_larger(2.0, 3.0)), x.tolist())
    except Exception as error:
        print(type(error).__name__, error)
    """
)

_RESTORING_DEVICE_CALLS = textwrap.dedent(
    """
    import triton
    import triton.language as tl
    from triton.runtime import interpreter

    from kernelaudit.interpret import patches

    # an interpreter whose device calls restore what they patch: skipping one would leave the
    # language unpatched for the next, so it keeps its own patching
    def __call__(self, *args, **kwargs):
        scope = _patch_lang(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        finally:
            scope.restore()

    interpreter.InterpretedFunction.__call__ = __call__
    before = interpreter._patch_lang, interpreter._patch_builtin
    print(patches.install(), (interpreter._patch_lang, interpreter._patch_builtin) == before)
    """
)


def _interpreted(
    script: str, *arguments: str, interpreting: bool = True
) -> subprocess.CompletedProcess[str]:
    # the package where this test finds it (installed, or on PYTHONPATH)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": os.pathsep.join(sys.path)}
    if interpreting:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run(
        [sys.executable, "-c", script, *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_kernels_with_device_calls_give_the_same_bits_and_leave_the_language_as_it_was() -> None:
    ran = _interpreted(_KERNELS)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split()[-1] == "same"


def test_a_jit_function_called_from_python_after_a_launch_runs_as_it_did() -> None:
    plain, installed = (
        _interpreted(_DIRECT_AFTER_A_LAUNCH, side) for side in ("plain", "installed")
    )
    assert plain.returncode == installed.returncode == 0, (plain.stderr[-2000:], installed.stderr)
    assert installed.stdout == plain.stdout == "array([3.], dtype=float32) [1.0]\n"


def test_an_interpreter_laid_out_otherwise_keeps_its_own_patching() -> None:
    ran = _interpreted(_RESTORING_DEVICE_CALLS)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == ["False", "True"]


def test_nothing_is_installed_where_kernels_are_not_interpreted() -> None:
    script = textwrap.dedent(
        """
        import triton.runtime.interpreter as interpreter
        from kernelaudit.interpret import patches
        before = interpreter._patch_builtin
        print(patches.install(), interpreter._patch_builtin is before)
        """
    )
    ran = _interpreted(script, interpreting=False)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.split() == ["False", "True"]
