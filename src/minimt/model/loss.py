"""Label-smoothed cross-entropy with a hand-written gradient: few passes over the logits."""

from __future__ import annotations

import torch
from torch import Tensor


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Sum over rows of (1 - eps) * -log p(target) + eps * mean over classes of -log p(class).

    Equal to F.cross_entropy(..., label_smoothing=eps, reduction="sum"). The backward turns the
    saved log-probabilities into softmax - (1 - eps) * onehot - eps / V directly, in one pass
    over the memory-bound (N, V) array instead of log_softmax's and nll_loss's generic passes
    (docs/performance.md).
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float) -> Tensor:
        # fp32 at least, so half-precision logits are normalised exactly (fp64 stays fp64);
        # log_softmax converts as it reads: no (N, V) fp32 copy of the logits
        dtype = torch.promote_types(logits.dtype, torch.float32)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=dtype)  # (N, V)
        nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (N,)
        smooth = -log_probs.mean(dim=-1)  # (N,)
        ctx.save_for_backward(log_probs, target)
        ctx.eps, ctx.logits_dtype = eps, logits.dtype
        return ((1 - eps) * nll + eps * smooth).sum()

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None, None]:
        log_probs, target = ctx.saved_tensors
        eps, vocab = ctx.eps, log_probs.size(-1)
        grad = log_probs.exp().sub_(eps / vocab)  # (N, V)
        grad.scatter_add_(1, target[:, None], grad.new_full((target.numel(), 1), eps - 1))
        return grad.mul_(grad_output).to(ctx.logits_dtype), None, None


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, eps: float) -> Tensor:
    """Summed label-smoothed cross-entropy of (N, V) logits against (N,) class ids (no padding)."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, eps)
