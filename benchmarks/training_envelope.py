"""Calibrate the training check's envelope: how far correct kernels that round differently, and
kernels known to be wrong, move a training run from the reference's, next to how far the one-ulp
perturbed runs move it.

    python benchmarks/training_envelope.py --device cuda --out envelope.json

Every perturbed run is also judged as if it were a candidate, against the other perturbed runs
(leave one out): that is the judgement's null distribution, what a correct kernel scores. A
statistic whose null reaches the failing slack gives false positives; one whose wrong kernels
stay under it misses bugs. Kernels run in this process (they are the bundled examples and plain
torch controls, all trusted).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType

import torch

from kernelaudit.engine.audit import environment, resolve_device
from kernelaudit.problem.load import load_problem
from kernelaudit.training.data import batches, token_counts, token_stream
from kernelaudit.training.envelope import tail_gap
from kernelaudit.training.experiment import slot_dtypes
from kernelaudit.training.loop import Experiment, Perturbed, Rounded, Trajectory, train
from kernelaudit.training.shadow import Shadowed, shadow, shadow_all
from kernelaudit.training.slots import Plug

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.parent.name + "_candidates", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def embedding_index_add_fp32(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int
) -> torch.Tensor:
    """Correct, summed in another order than the reference (atomics on a GPU)."""
    total = torch.zeros(num_embeddings, grad_out.shape[1], device=grad_out.device)
    return total.index_add_(0, ids, grad_out.float()).to(grad_out.dtype)


def embedding_native_partials(
    grad_out: torch.Tensor, ids: torch.Tensor, num_embeddings: int
) -> torch.Tensor:
    """Wrong: partial sums over 64-token chunks added up in the gradient's own dtype."""
    shape = (num_embeddings, grad_out.shape[1])
    total = torch.zeros(shape, dtype=grad_out.dtype, device=grad_out.device)
    for start in range(0, ids.shape[0], 64):
        partial = torch.zeros(shape, device=grad_out.device)
        partial.index_add_(0, ids[start : start + 64], grad_out[start : start + 64].float())
        total = total + partial.to(grad_out.dtype)
    return total


def rmsnorm_chunked(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Correct: the weight gradient as fp32 partials over 64-row chunks, grad_x factored
    differently; one rounding per output."""
    g, xf, w = grad_out.float(), x.float(), weight.float()
    r = rstd.float()[:, None]
    x_hat = xf * r
    correction = (g * w * x_hat).sum(-1, keepdim=True) / x.shape[-1]
    grad_x = r * g * w - (r * x_hat) * correction
    rows = x.shape[0]
    pad = (-rows) % 64
    terms = torch.nn.functional.pad(g * x_hat, (0, 0, 0, pad))
    grad_weight = terms.reshape(-1, 64, x.shape[-1]).sum(1).sum(0)
    return grad_x.to(x.dtype), grad_weight.to(weight.dtype)


def rmsnorm_native_weight_grad(
    grad_out: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Wrong: the weight gradient summed over rows in the weight's own dtype."""
    g, xf = grad_out.float(), x.float()
    r = rstd.float()[:, None]
    x_hat = xf * r
    weighted = g * weight.float()
    grad_x = r * (weighted - x_hat * (weighted * x_hat).mean(-1, keepdim=True))
    terms = (g * x_hat).to(weight.dtype)
    total = torch.zeros_like(weight)
    for start in range(0, terms.shape[0], 256):
        total = total + terms[start : start + 256].sum(0)
    return grad_x.to(x.dtype), total


def _candidates(name: str, device: str, dtype: torch.dtype) -> dict[str, Callable[..., object]]:
    found: dict[str, Callable[..., object]] = {}
    if name == "embedding_backward":
        found["torch index_add fp32 (correct)"] = embedding_index_add_fp32
        found["torch native partials (wrong)"] = embedding_native_partials
        names = ("wide_accumulator", "accumulate_in_low_precision")
    else:
        found["torch chunked (correct)"] = rmsnorm_chunked
        found["torch native weight grad (wrong)"] = rmsnorm_native_weight_grad
        names = ("fp32_partials", "low_precision_partials")
    if device.startswith("cuda") or dtype != torch.bfloat16:  # the interpreter has no bf16
        module = _module(EXAMPLES / name / "candidates.py")
        for function in names:
            found[f"triton {function}"] = getattr(module, function)
    return found


def _row_norms(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    difference = a.double() - b.double()
    return difference.reshape(difference.shape[0] if difference.dim() >= 2 else 1, -1).norm(dim=1)


def _summary(reference: Trajectory, perturbed: list[Trajectory], run: Trajectory) -> dict:
    """Free-running runs: the loss gap and, row by row, the final parameters' distance, each in
    units of the envelope's largest (the row-by-row ratio is floored at the envelope's median
    row, as the judgement before shadowing did)."""
    if run.error:
        return {"error": run.error}
    loss = tail_gap(run.losses, reference.losses) / max(
        max(tail_gap(p.losses, reference.losses) for p in perturbed), 1e-12
    )
    rows = {}
    for name, final in reference.parameters.items():
        distance = _row_norms(run.parameters[name], final)
        bound = torch.stack([_row_norms(p.parameters[name], final) for p in perturbed]).amax(0)
        bound = bound.clamp_min(max(float(bound.median()), 1e-30))
        rows[name] = float((distance / bound).max())
    worst = max(rows, key=rows.__getitem__)
    return {"loss": round(loss, 3), "rows": round(rows[worst], 3), "rows worst": worst}


def _shadow_summary(envelope: list[Shadowed], run: Shadowed, hot: torch.Tensor) -> dict:
    if run.error:
        return {"error": run.error}
    ratios = {}
    for name, drift in run.drift.items():
        bound = max(float(e.drift[name].norm()) for e in envelope)
        ratios[name] = float(drift.norm()) / bound if bound else 0.0
        if name == "embedding":
            bound = max(float(e.drift[name][hot].norm()) for e in envelope)
            ratios["embedding[hot]"] = float(drift[hot].norm()) / bound if bound else 0.0
    worst = max(ratios, key=ratios.__getitem__)
    return {
        "shadow": round(ratios[worst], 3),
        "shadow worst": worst,
        "shadow hot": round(ratios.get("embedding[hot]", 0.0), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="auto")
    parser.add_argument("--problems", nargs="*", default=["embedding_backward", "rmsnorm_backward"])
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--settings", nargs="*", default=["sgd:0.1", "sgd:0.03", "adamw:0.003"])
    parser.add_argument("--runs", type=int, default=5, help="perturbed runs")
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("training-envelope.json"))
    args = parser.parse_args()
    device = resolve_device(args.device)
    base = Experiment.for_device(device, args.steps)
    record: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device,
        "environment": dict(environment(device)),
        "model": base.config.__dict__,
        "steps": base.steps,
        "batch": base.batch,
        "rows": [],
    }
    stream = token_stream(base.config.vocab, 1 << 20, base.seed)
    tokens = batches(stream, base.batch, base.config.seq, base.steps, base.seed)
    counts = token_counts(tokens, base.config.vocab)
    # the most frequent 1% of the vocabulary: where an accumulation error concentrates
    hot = torch.topk(counts, max(1, base.config.vocab // 100)).indices
    for name in args.problems:
        problem = load_problem(EXAMPLES / name / "problem.py")
        wanted = getattr(torch, args.dtype)
        configs = problem.dtype_configs()
        config = next((i for i, c in enumerate(configs) if wanted in c.values()), None)
        if config is not None:
            dtypes = slot_dtypes(problem, config)
        else:
            # a dtype the problem leaves out for the CPU interpreter's sake (bf16) still trains
            # on a GPU: every floating argument of its first configuration takes that dtype
            dtypes = tuple(
                wanted if d is not None and d.is_floating_point else d
                for d in slot_dtypes(problem, 0)
            )
            print(f"{name}: no {args.dtype} configuration; floats cast to it", flush=True)
        for setting in args.settings:
            optimizer, lr = setting.split(":")
            if optimizer == "sgd":
                experiment = replace(base, sgd_lr=float(lr))
            else:
                experiment = replace(base, adamw_lr=float(lr))
            began = time.perf_counter()
            reference = train(
                experiment, optimizer, Plug(problem.slot, problem.reference, dtypes), tokens, device
            )
            perturbed = [
                train(
                    experiment,
                    optimizer,
                    Plug(problem.slot, Perturbed(problem.reference, seed), dtypes),
                    tokens,
                    device,
                )
                for seed in range(1, args.runs + 1)
            ]
            null = [
                _summary(reference, perturbed[:k] + perturbed[k + 1 :], perturbed[k])
                for k in range(len(perturbed))
            ]
            # drift from the correctly rounded slot, as the check measures it; the native
            # reference is the last member of the envelope, as in the check
            centre = Plug(problem.slot, Rounded(problem.reference), dtypes)
            members = [
                Plug(problem.slot, Perturbed(problem.reference, seed), dtypes)
                for seed in range(1, args.runs + 1)
            ]
            members.append(Plug(problem.slot, problem.reference, dtypes))
            shadows = shadow_all(experiment, optimizer, centre, members, tokens, device)
            for k, summary in enumerate(null):
                summary.update(_shadow_summary(shadows[:k] + shadows[k + 1 :], shadows[k], hot))
            row: dict = {
                "problem": name,
                "dtype": args.dtype,
                "setting": setting,
                "final loss": reference.losses[-1] if reference.losses else None,
                "null (leave one out)": null,
                "candidates": {},
            }
            for label, function in _candidates(name, device, wanted).items():
                run = train(
                    experiment, optimizer, Plug(problem.slot, function, dtypes), tokens, device
                )
                # against as many perturbed runs as each null sample has
                row["candidates"][label] = _summary(reference, perturbed[1:], run)
                shadowed = shadow(
                    experiment,
                    optimizer,
                    centre,
                    Plug(problem.slot, function, dtypes),
                    tokens,
                    device,
                )
                row["candidates"][label].update(_shadow_summary(shadows[1:], shadowed, hot))
            row["seconds"] = round(time.perf_counter() - began, 1)
            record["rows"].append(row)
            print(json.dumps(row), flush=True)
            args.out.write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
