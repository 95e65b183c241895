"""Float32 cross-entropy backward kernels for the training check's float32 envelope (written in
torch: what matters here is how their results are rounded, not how fast they are)."""

from __future__ import annotations

import torch


def _exact(grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    grad = torch.softmax(logits.double(), -1)
    grad[torch.arange(grad.shape[0], device=grad.device), targets] -= 1
    return grad * grad_loss.double().unsqueeze(-1)


def quarter_ulp_low(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Correct: the correctly rounded result, every other element (at random) one ulp lower, a
    bias of about a quarter of an ulp, the size an approximate exponential has."""
    rounded = _exact(grad_loss, logits, targets).float()
    lower = torch.nextafter(rounded, torch.zeros_like(rounded))
    generator = torch.Generator(rounded.device).manual_seed(1)
    picked = torch.rand(rounded.shape, device=rounded.device, generator=generator) < 0.5
    return torch.where(picked, lower, rounded)


def softmax_in_bf16(
    grad_loss: torch.Tensor, logits: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """Wrong: declared float32, but its softmax runs in bfloat16."""
    grad = torch.softmax(logits.bfloat16(), -1).float()
    grad[torch.arange(grad.shape[0], device=grad.device), targets] -= 1
    return (grad * grad_loss.float().unsqueeze(-1)).to(logits.dtype)
