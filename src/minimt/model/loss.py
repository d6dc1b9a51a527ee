"""Label-smoothed cross-entropy with a hand-written gradient: few passes over the logits."""

from __future__ import annotations

import torch
from torch import Tensor


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Sum over rows of (1 - eps) * -log p(target) + eps * mean over classes of -log p(class).

    Equal to F.cross_entropy(..., label_smoothing=eps, reduction="sum"). When a gradient is
    needed the forward makes it, (n, V) in the logits' dtype: softmax - (1 - eps) * onehot -
    eps / V, straight from the log-probabilities in one pass over the memory-bound (n, V) array
    instead of log_softmax's and nll_loss's generic backward passes (docs/performance.md); the
    backward scales it. log_softmax converts half-precision logits as it reads them.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float):
        dtype = torch.promote_types(logits.dtype, torch.float32)
        log_probs = torch.log_softmax(logits, dim=-1, dtype=dtype)  # (n, V)
        nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (n,)
        loss = ((1 - eps) * nll - eps * log_probs.mean(dim=-1)).sum()  # at least fp32
        grad = None
        if ctx.needs_input_grad[0]:
            grad = log_probs.exp_().sub_(eps / logits.size(-1))
            grad.scatter_add_(1, target[:, None], grad.new_full((target.numel(), 1), eps - 1))
            grad = grad.to(logits.dtype)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_output.to(grad.dtype), None, None


def label_smoothed_cross_entropy(logits: Tensor, target: Tensor, eps: float) -> Tensor:
    """Summed label-smoothed cross-entropy of (N, V) logits against (N,) class ids."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, eps)
