"""Large draws on several cores: the same values for a seed whatever the number of threads or
the machine, torch's own integers for tensors up to one piece, and the distribution's shape at
every size."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from kernelaudit.inputs import draws, reuse
from kernelaudit.inputs.distributions import draw_float


def _seeded(seed: int) -> torch.Generator:
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed)
    return generator


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> int:
    """Pieces of 1,000 elements, so a test tensor spans several without being large."""
    monkeypatch.setattr(draws, "CHUNK", 1000)
    return 1000


@pytest.mark.parametrize("numel", [0, 1, 15, 16, 17, 999, 1000])
def test_an_integer_tensor_of_one_piece_holds_torchs_own_draws(
    small_pieces: int, numel: int
) -> None:
    shape = (numel,)
    assert torch.equal(
        draws.randint(-4, 5, shape, _seeded(3)),
        torch.randint(-4, 5, shape, generator=_seeded(3), dtype=torch.int64),
    )


def test_floats_are_the_seeds_own_on_every_machine() -> None:
    """The same seed gives the same bits whatever vector instructions torch picks for this
    CPU: what a reproducer replayed on another machine needs."""
    script = (
        "import hashlib, torch\n"
        "from kernelaudit.inputs import draws\n"
        "g = torch.Generator().manual_seed(7)\n"
        "for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):\n"
        "    x = torch.cat([draws.randn((3000,), g, dtype), draws.rand((3000,), g, dtype)])\n"
        "    print(hashlib.sha256(x.view(torch.uint8).numpy().tobytes()).hexdigest())\n"
    )
    seen = []
    for capability in ("default", "avx2"):
        env = {**os.environ, "ATEN_CPU_CAPABILITY": capability}
        done = subprocess.run(
            [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True
        )
        seen.append(done.stdout.split())
    assert len(seen[0]) == 4 and seen[0] == seen[1]


def test_half_precision_is_float32_rounded_and_uniform_stays_below_one() -> None:
    for dtype in (torch.float16, torch.bfloat16):
        normal = draws.randn((5000,), _seeded(4), dtype)
        assert normal.dtype == dtype
        assert torch.equal(normal, draws.randn((5000,), _seeded(4), torch.float32).to(dtype))
        uniform = draws.rand((1 << 16,), _seeded(4), dtype)
        assert float(uniform.max()) < 1.0 and float(uniform.min()) >= 0.0
    with pytest.raises(TypeError, match="floating draws"):
        draws.randn((3,), _seeded(4), torch.int32)


def test_the_values_depend_on_the_seed_not_on_the_threads(small_pieces: int) -> None:
    shape = (7, 1234)  # nine pieces, the last one short
    before = torch.get_num_threads()
    drawn = []
    try:
        for threads in (1, 2, 4):
            torch.set_num_threads(threads)
            drawn.append((draws.randn(shape, _seeded(9)), draws.rand(shape, _seeded(9))))
    finally:
        torch.set_num_threads(before)
    for normal, uniform in drawn[1:]:
        assert torch.equal(normal, drawn[0][0]) and torch.equal(uniform, drawn[0][1])
    other = draws.randn(shape, _seeded(10))
    assert not torch.equal(other, drawn[0][0])


def test_the_pieces_are_independent_draws(small_pieces: int) -> None:
    values = draws.randn((200, small_pieces), _seeded(1))
    pieces = values.view(200, small_pieces)
    # no piece repeats another (a generator reused for two pieces would)
    assert len({tuple(row[:4].tolist()) for row in pieces}) == 200
    assert abs(float(values.mean())) < 0.01
    assert abs(float(values.std()) - 1.0) < 0.01
    uniform = draws.rand((200, small_pieces), _seeded(1))
    assert float(uniform.min()) >= 0.0 and float(uniform.max()) < 1.0
    assert abs(float(uniform.mean()) - 0.5) < 0.01
    integers = draws.randint(-4, 5, (200, small_pieces), _seeded(1))
    assert set(integers.unique().tolist()) == set(range(-4, 5))


@pytest.mark.parametrize("name", ["normal", "offset", "large", "heavy_tailed", "uniform"])
def test_a_distribution_drawn_in_pieces_keeps_its_shape(small_pieces: int, name: str) -> None:
    values = draw_float(name, (64, 500), torch.float32, _seeded(2))
    again = draw_float(name, (64, 500), torch.float32, _seeded(2))
    assert torch.equal(values, again)
    assert values.dtype == torch.float32 and bool(torch.isfinite(values).all())
    assert values.unique().numel() > 30_000  # pieces drawn alike would repeat values


def test_draws_seeded_through_the_global_generator_follow_its_seed() -> None:
    """What a benchmark's own generator does (`torch.manual_seed`, then draws): the same seed
    gives the same values, drawn in pieces or not, and another seed others."""
    drawn = []
    for seed in (4, 4, 5):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            drawn.append(draws.randn((3, 5), draws.from_global(), torch.float32))
    assert drawn[0].dtype == torch.float32
    assert torch.equal(drawn[0], drawn[1]) and not torch.equal(drawn[0], drawn[2])


def _benchmark_inputs() -> tuple[torch.Tensor, ...]:
    """What a benchmark's own input generator does: plain draws from the global generator."""
    return torch.randn(3, 1234, dtype=torch.bfloat16), torch.rand((5000,)), torch.randn(10)


def test_a_benchmarks_large_plain_draws_are_spread_and_follow_the_global_seed(
    small_pieces: int,
) -> None:
    drawn = []
    for _ in range(2):
        torch.manual_seed(5)
        with draws.spread_global_draws():
            drawn.append(_benchmark_inputs())
    torch.manual_seed(5)
    expected = (
        draws.randn((3, 1234), draws.from_global(), torch.bfloat16),
        draws.rand((5000,), draws.from_global(), torch.float32),
        torch.randn(10),  # one piece or less: torch's own draw from the global generator
    )
    for first, second, wanted in zip(*drawn, expected, strict=True):
        assert first.dtype == wanted.dtype and first.shape == wanted.shape
        assert torch.equal(first, second) and torch.equal(first, wanted)
    torch.manual_seed(6)
    with draws.spread_global_draws():
        other = _benchmark_inputs()
    assert not torch.equal(other[0], drawn[0][0])


@pytest.fixture
def kept_draws(monkeypatch: pytest.MonkeyPatch) -> reuse.Draws:
    """A store of kept draws of its own that keeps draws of 1,000 elements and more."""
    kept = reuse.Draws(most_bytes=1 << 26)
    monkeypatch.setattr(draws, "DRAWS", kept)
    monkeypatch.setattr(reuse, "SMALLEST", 1000)
    return kept


def test_a_weight_drawn_at_the_same_place_in_the_global_sequence_is_drawn_once(
    small_pieces: int, kept_draws: reuse.Draws
) -> None:
    """A benchmark's generator at two sizes: an activation whose shape follows the size, then
    a weight whose shape does not. The weight is the seed's draw, bit for bit, made once."""
    made = []
    for rows in (3, 7):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(4)
            made.append((draws.kept_randn((rows, 1000)), draws.kept_randn((2000, 3))))
    (_, first), (_, second) = made
    assert second is first
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(4)
        draws.from_global()
        fresh = draws.randn((2000, 3), draws.from_global(), torch.float32)
    assert torch.equal(first, fresh)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        draws.from_global()
        assert not torch.equal(draws.kept_randn((2000, 3)), first)


def test_a_benchmark_generator_that_writes_into_its_draws_writes_into_its_own(
    small_pieces: int, kept_draws: reuse.Draws
) -> None:
    def generate(halved: bool) -> torch.Tensor:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(5)
            with draws.spread_global_draws():
                weight = torch.randn(2000, 3)
                if halved:
                    weight.mul_(0.5)
        return weight

    first, plain, again = generate(True), generate(False), generate(True)
    assert torch.equal(first, again) and torch.equal(first, plain * 0.5)


def test_draws_made_a_way_of_their_own_are_torchs(small_pieces: int) -> None:
    torch.manual_seed(2)
    with draws.spread_global_draws():
        given = torch.randn(5000, generator=_seeded(1))
        needing_grad = torch.randn(5000, requires_grad=True)
        integers = torch.randint(0, 5, (5000,))
    assert torch.equal(given, torch.randn(5000, generator=_seeded(1)))
    torch.manual_seed(2)
    assert torch.equal(needing_grad.detach(), torch.randn(5000))
    assert torch.equal(integers, torch.randint(0, 5, (5000,)))
    assert needing_grad.requires_grad
