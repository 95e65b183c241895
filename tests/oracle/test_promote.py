import math
import threading

import pytest
import torch
import torch.nn.functional as F

from kernelaudit.oracle.promote import promoted_to_fp64

THIRD = 1 / 3  # not representable in any binary format: every rounding shows


@pytest.fixture
def x() -> torch.Tensor:
    return torch.full((4, 6), THIRD, dtype=torch.float64) + torch.arange(24.0).reshape(4, 6) * 1e-9


def third(*shape: int) -> torch.Tensor:
    return torch.full(shape, THIRD, dtype=torch.float64)


def run(reference, *args):
    with promoted_to_fp64():
        return reference(*args)


CASTS = {
    "to(dtype)": lambda x: x.to(torch.bfloat16) * 3,
    "to(device, dtype)": lambda x: x.to("cpu", torch.float16) * 3,
    "to(dtype=)": lambda x: x.to(dtype=torch.float16) * 3,
    "to(other)": lambda x: x.to(torch.ones(1, dtype=torch.bfloat16)) * 3,
    "half": lambda x: x.half() * 3,
    "bfloat16": lambda x: x.bfloat16() * 3,
    "float": lambda x: x.float() * 3,
    "type(dtype)": lambda x: x.type(torch.float16) * 3,
    "type(name)": lambda x: x.type("torch.HalfTensor") * 3,
    "type(class)": lambda x: x.type(torch.BFloat16Tensor) * 3,
    "type_as": lambda x: x.type_as(torch.ones(1, dtype=torch.float16)) * 3,
}


@pytest.mark.parametrize("construct", CASTS)
def test_casts_become_float64(construct, x):
    result = run(CASTS[construct], x)
    assert result.dtype == torch.float64
    assert torch.equal(result, x * 3)


def test_a_cast_to_float8_is_a_quantization_the_truth_keeps(x):
    # the quantization is part of the specified function; what follows it runs in float64
    result = run(lambda x: x.to(torch.float8_e4m3fn) * 3, x)
    assert result.dtype == torch.float64
    assert torch.equal(result, x.to(torch.float8_e4m3fn).double() * 3)
    assert not torch.equal(result, x * 3)


FACTORIES = {
    "zeros": (lambda x: torch.zeros(3, dtype=torch.bfloat16) + THIRD, lambda x: third(3)),
    "ones": (lambda x: torch.ones(3, dtype=torch.half) * THIRD, lambda x: third(3)),
    "empty": (
        lambda x: torch.empty(3, dtype=torch.bfloat16).fill_(THIRD),
        lambda x: third(3),
    ),
    "full": (lambda x: torch.full((3,), THIRD, dtype=torch.half), lambda x: third(3)),
    "arange": (
        lambda x: torch.arange(0, 1, THIRD, dtype=torch.bfloat16),
        lambda x: torch.arange(0, 1, THIRD, dtype=torch.float64),
    ),
    "linspace": (
        lambda x: torch.linspace(0, 1, 7, dtype=torch.half),
        lambda x: torch.linspace(0, 1, 7, dtype=torch.float64),
    ),
    "tensor": (lambda x: torch.tensor([THIRD], dtype=torch.half), lambda x: third(1)),
    "as_tensor": (
        lambda x: torch.as_tensor([THIRD], dtype=torch.float32),
        lambda x: third(1),
    ),
    "eye": (
        lambda x: torch.eye(2, dtype=torch.half) * THIRD,
        lambda x: torch.eye(2, dtype=torch.float64) * THIRD,
    ),
    "zeros_like": (
        lambda x: torch.zeros_like(x, dtype=torch.half) + THIRD,
        lambda x: third(4, 6),
    ),
    "ones_like": (
        lambda x: torch.ones_like(x, dtype=torch.half) * THIRD,
        lambda x: third(4, 6),
    ),
    "empty_like": (
        lambda x: torch.empty_like(x, dtype=torch.half).copy_(x),
        lambda x: x,
    ),
    "full_like": (
        lambda x: torch.full_like(x, THIRD, dtype=torch.bfloat16),
        lambda x: third(4, 6),
    ),
    "new_zeros": (lambda x: x.new_zeros(3, dtype=torch.half) + THIRD, lambda x: third(3)),
    "new_ones": (lambda x: x.new_ones(3, dtype=torch.half) * THIRD, lambda x: third(3)),
    "new_empty": (
        lambda x: x.new_empty(3, dtype=torch.half).fill_(THIRD),
        lambda x: third(3),
    ),
    "new_full": (lambda x: x.new_full((3,), THIRD, dtype=torch.half), lambda x: third(3)),
    "new_tensor": (
        lambda x: x.new_tensor([THIRD], dtype=torch.half),
        lambda x: third(1),
    ),
    "zeros without dtype": (lambda x: torch.zeros(3) + THIRD, lambda x: third(3)),
    "python float scalar": (
        lambda x: torch.tensor(THIRD),
        lambda x: torch.tensor(THIRD, dtype=torch.float64),
    ),
    "low-precision buffer written with copy_": (
        lambda x: torch.empty(4, 6, dtype=torch.bfloat16).copy_(x) * 3,
        lambda x: x * 3,
    ),
}


@pytest.mark.parametrize("construct", FACTORIES)
def test_factories_create_float64(construct, x):
    reference, expected = FACTORIES[construct]
    result = run(reference, x)
    assert result.dtype == torch.float64
    assert torch.equal(result, expected(x))


@pytest.mark.parametrize("construct", FACTORIES)
def test_factories_create_float64_in_a_block_of_this_thread_alone(construct, x):
    reference, expected = FACTORIES[construct]
    with promoted_to_fp64(process_wide=False):
        assert torch.get_default_dtype() == torch.float32
        result = reference(x)
    assert result.dtype == torch.float64
    assert torch.equal(result, expected(x))


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(3),
        lambda: torch.tensor([1, 2]),
        lambda: torch.full((2,), 3),
        lambda: torch.tensor(True),
        lambda: torch.as_tensor([4]),
    ],
)
def test_a_block_of_this_thread_alone_keeps_integer_and_bool_factories(make):
    expected = make()
    with promoted_to_fp64(process_wide=False):
        made = make()
    assert made.dtype == expected.dtype and torch.equal(made, expected)


def test_a_block_of_this_thread_alone_leaves_other_threads_as_they_were():
    """The training check trains the reference in one thread and the candidate in another;
    the float64 rounding of the one must not reach the other's tensors or settings."""
    inside, looked = threading.Event(), threading.Event()
    seen = []

    def other() -> None:
        inside.wait(10)
        seen.append((torch.get_default_dtype(), torch.zeros(1).dtype, torch.tensor(0.5).dtype))
        seen.append(torch.backends.cudnn.allow_tf32)
        looked.set()

    thread = threading.Thread(target=other)
    thread.start()
    tf32 = torch.backends.cudnn.allow_tf32
    with promoted_to_fp64(process_wide=False):
        inside.set()
        assert looked.wait(10)
        assert torch.zeros(1).dtype == torch.float64
    thread.join()
    assert seen == [(torch.float32, torch.float32, torch.float32), tf32]


@pytest.mark.parametrize(
    "factory",
    [
        lambda x: torch.rand(3, dtype=torch.half),
        lambda x: torch.randn(3, dtype=torch.bfloat16),
        lambda x: torch.rand_like(x, dtype=torch.half),
        lambda x: torch.randn_like(x, dtype=torch.half),
    ],
)
def test_random_factories_create_float64(factory, x):
    assert run(factory, x).dtype == torch.float64


REDUCTIONS = {
    "sum": (lambda x: x.sum(dtype=torch.bfloat16), lambda x: x.sum()),
    "mean": (lambda x: x.mean(dtype=torch.half), lambda x: x.mean()),
    "torch.sum positional dim": (lambda x: torch.sum(x, 1, dtype=torch.half), lambda x: x.sum(1)),
    "prod": (lambda x: x.prod(1, dtype=torch.half), lambda x: x.prod(1)),
    "cumsum": (lambda x: x.cumsum(1, dtype=torch.bfloat16), lambda x: x.cumsum(1)),
    "softmax": (lambda x: x.softmax(-1, dtype=torch.half), lambda x: x.softmax(-1)),
    "softmax positional dtype": (
        lambda x: torch.softmax(x, -1, torch.half),
        lambda x: x.softmax(-1),
    ),
    "log_softmax": (
        lambda x: torch.log_softmax(x, -1, dtype=torch.float32),
        lambda x: x.log_softmax(-1),
    ),
    "F.softmax": (lambda x: F.softmax(x, dim=-1, dtype=torch.bfloat16), lambda x: x.softmax(-1)),
    "F.log_softmax": (
        lambda x: F.log_softmax(x.float(), dim=-1, dtype=torch.float16),
        lambda x: x.log_softmax(-1),
    ),
    "accumulation the bfloat16 way": (
        lambda x: x.to(torch.bfloat16).sum(-1).to(torch.bfloat16),
        lambda x: x.sum(-1),
    ),
}


@pytest.mark.parametrize("construct", REDUCTIONS)
def test_reductions_with_dtype_compute_in_float64(construct, x):
    reference, by_hand = REDUCTIONS[construct]
    result = run(reference, x)
    assert result.dtype == torch.float64
    assert torch.equal(result, by_hand(x))


def test_integer_and_bool_dtypes_are_untouched(x):
    def reference(x):
        return x.to(torch.int32), torch.zeros(2, dtype=torch.int16), (x > 0.5).to(torch.bool)

    ints, zeros, flags = run(reference, x * 10)
    assert (ints.dtype, zeros.dtype, flags.dtype) == (torch.int32, torch.int16, torch.bool)
    assert torch.equal(ints, (x * 10).to(torch.int32))
    assert torch.tensor([1, 2]).dtype == torch.int64


def test_complex_becomes_complex128():
    result = run(lambda: torch.ones(2, dtype=torch.complex64) / 3)
    assert result.dtype == torch.complex128
    assert result[0].real.item() == THIRD


def test_weights_created_outside_are_promoted_where_used(x):
    weight = torch.full((6, 2), THIRD, dtype=torch.float32)  # e.g. a module's parameter
    layer = torch.nn.Linear(6, 2).to(torch.bfloat16)
    result = run(lambda x: x @ weight, x)
    assert result.dtype == torch.float64
    assert torch.equal(result, x @ weight.double())
    out = run(layer, x)
    assert out.dtype == torch.float64
    assert torch.equal(out, F.linear(x, layer.weight.double(), layer.bias.double()))
    assert weight.dtype == torch.float32  # the caller's tensors are not changed


def test_in_place_writes_into_inputs_are_kept(x):
    before = x.clone()

    def reference(x):
        x.mul_(2)
        x[0, 0] = THIRD
        x += torch.ones_like(x, dtype=torch.half)
        return x

    result = run(reference, x)
    assert result is x
    expected = before * 2
    expected[0, 0] = THIRD
    assert torch.equal(x, expected + 1)


def test_default_dtype_is_restored_even_after_an_error():
    with pytest.raises(RuntimeError), promoted_to_fp64():
        assert torch.zeros(1).dtype == torch.float64
        raise RuntimeError("reference failed")
    assert torch.get_default_dtype() == torch.float32
    assert torch.zeros(1).to(torch.half).dtype == torch.half


def test_fsum_exactness_of_a_bfloat16_accumulation():
    values = torch.rand(5000, dtype=torch.float64).to(torch.bfloat16).to(torch.float64)
    result = run(lambda v: v.to(torch.bfloat16).sum(dtype=torch.bfloat16), values)
    assert abs(result.item() - math.fsum(values.tolist())) <= 1e-12 * math.fsum(values.tolist())
