"""How biased a cross-entropy backward candidate's float32 results are, next to torch's own.

    python benchmarks/slot_bias.py examples/cross_entropy_backward/candidates.py::fp32_softmax

For logits of 8192 x 8192 drawn at two scales, compares the candidate's gradient and the
slot's plain-torch reference, both in float32, with the float64 result rounded to float32:
the mean signed and mean absolute error in units in the last place (off the target entries),
the largest, and how coherent the errors of each column are (|sum of errors| / sum of |errors|,
averaged over columns: what a weight gradient that sums over rows keeps of them). Random
rounding errors cancel in such sums; a bias does not.
"""

from __future__ import annotations

import argparse

import torch

from kernelaudit.runner.candidate import load_candidate, parse_candidate
from kernelaudit.training.slots import REFERENCES


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidate", help="path/file.py::function")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--size", type=int, default=8192)
    args = parser.parse_args()
    candidate = load_candidate(parse_candidate(args.candidate))
    reference = REFERENCES["cross_entropy_backward"]
    n, device = args.size, args.device
    generator = torch.Generator(device).manual_seed(0)
    for scale in (1.0, 4.0):
        logits = torch.randn(n, n, device=device, generator=generator) * scale
        targets = torch.randint(0, n, (n,), device=device, generator=generator)
        upstream = torch.full((n,), 1 / n, device=device)
        truth = reference(upstream.double(), logits.double(), targets).float()
        infinity = torch.tensor(float("inf"), device=device)
        ulp = torch.nextafter(truth.abs(), infinity) - truth.abs()
        off = torch.ones_like(truth, dtype=torch.bool)
        off[torch.arange(n, device=device), targets] = False
        for name, out in (
            ("candidate", candidate(upstream, logits, targets)),
            ("torch", reference(upstream, logits, targets)),
        ):
            error = (out - truth).double()
            ulps = (error / ulp)[off]
            coherence = error.sum(0).abs() / error.abs().sum(0).clamp_min(1e-300)
            print(
                f"logits x{scale:g}  {name:9s}  mean signed {float(ulps.mean()):+.3f} ulp  "
                f"mean |error| {float(ulps.abs().mean()):.3f} ulp  "
                f"largest {float(ulps.abs().max()):.0f} ulp  "
                f"column coherence {float(coherence.mean()):.3f}"
            )


if __name__ == "__main__":
    main()
