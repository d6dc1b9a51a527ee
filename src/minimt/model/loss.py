"""Label-smoothed cross-entropy with a hand-written gradient: few passes over the logits, and
optionally the output projection folded in, a chunk of rows at a time."""

from __future__ import annotations

import torch
from torch import Tensor


def _loss_and_logit_gradient(
    logits: Tensor, target: Tensor, eps: float, need_gradient: bool, ignore_index: int | None
) -> tuple[Tensor, Tensor | None]:
    """(n, V) logits, (n,) ids -> the summed loss (at least fp32) and, if asked, its gradient with
    respect to the logits, (n, V) in the logits' dtype: softmax - (1 - eps) * onehot - eps / V;
    rows whose target is `ignore_index` add 0 and get a 0 gradient.

    The gradient comes straight from the log-probabilities in one pass over the memory-bound
    (n, V) array instead of log_softmax's and nll_loss's generic backward passes
    (docs/performance.md). log_softmax converts half-precision logits as it reads them.
    """
    dtype = torch.promote_types(logits.dtype, torch.float32)
    log_probs = torch.log_softmax(logits, dim=-1, dtype=dtype)  # (n, V)
    nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (n,)
    row_loss = (1 - eps) * nll - eps * log_probs.mean(dim=-1)  # (n,)
    kept = None if ignore_index is None else (target != ignore_index)  # (n,)
    loss = (row_loss if kept is None else row_loss * kept).sum()
    if not need_gradient:
        return loss, None
    grad = log_probs.exp_().sub_(eps / logits.size(-1))
    grad.scatter_add_(1, target[:, None], grad.new_full((target.numel(), 1), eps - 1))
    if kept is not None:
        grad.mul_(kept[:, None])
    return loss, grad.to(logits.dtype)


class _LabelSmoothedCrossEntropy(torch.autograd.Function):
    """Sum over rows of (1 - eps) * -log p(target) + eps * mean over classes of -log p(class).

    Equal to F.cross_entropy(..., label_smoothing=eps, reduction="sum"). The gradient is made in
    the forward (when one is needed) and kept in the logits' dtype; the backward scales it.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, eps: float, ignore_index: int | None):
        need_gradient = ctx.needs_input_grad[0]
        loss, grad = _loss_and_logit_gradient(logits, target, eps, need_gradient, ignore_index)
        ctx.save_for_backward(grad)
        return loss

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, None, None, None]:
        (grad,) = ctx.saved_tensors
        return grad * grad_output.to(grad.dtype), None, None, None


class _ProjectedLabelSmoothedCrossEntropy(torch.autograd.Function):
    """The output projection and the label-smoothed loss together, `chunk` rows at a time.

    Each chunk's logits, loss and gradients with respect to its hidden rows and the output
    matrix are made in the forward, so neither the (N, V) logits nor their log-probabilities
    exist whole and nothing (N, V) is kept for the backward, which scales the stored gradients.
    Under autocast the products run in the autocast dtype, the output matrix cast once per call.
    """

    @staticmethod
    def forward(
        ctx,
        hidden: Tensor,
        weight: Tensor,
        target: Tensor,
        eps: float,
        chunk: int,
        ignore_index: int | None,
    ):
        device = hidden.device.type
        autocast = torch.is_autocast_enabled(device)
        dtype = torch.get_autocast_dtype(device) if autocast else hidden.dtype
        need_gradient = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        with torch.autocast(device, enabled=False):
            h, w = hidden.to(dtype), weight.to(dtype)  # (N, d), (V, d)
            grad_hidden = torch.empty_like(h) if need_gradient else None  # (N, d)
            summed = torch.promote_types(weight.dtype, torch.float32)
            grad_weight = torch.zeros_like(weight, dtype=summed) if need_gradient else None
            total = hidden.new_zeros((), dtype=torch.promote_types(dtype, torch.float32))
            for start in range(0, h.size(0), chunk):
                rows = slice(start, start + chunk)
                logits = h[rows] @ w.T  # (chunk, V)
                loss, grad = _loss_and_logit_gradient(
                    logits, target[rows], eps, need_gradient, ignore_index
                )
                total += loss
                if need_gradient:
                    grad_hidden[rows] = grad @ w
                    grad_weight += grad.T @ h[rows]  # (V, d), summed in fp32 at least
        ctx.save_for_backward(grad_hidden, grad_weight)
        ctx.dtypes = hidden.dtype, weight.dtype
        return total

    @staticmethod
    def backward(ctx, grad_output: Tensor) -> tuple[Tensor, Tensor, None, None, None, None]:
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        return (
            (grad_hidden * grad_output).to(hidden_dtype),
            (grad_weight * grad_output).to(weight_dtype),
            None,
            None,
            None,
            None,
        )


def label_smoothed_cross_entropy(
    logits: Tensor, target: Tensor, eps: float, ignore_index: int | None = None
) -> Tensor:
    """Summed label-smoothed cross-entropy of (N, V) logits against (N,) class ids; the rows
    whose id is `ignore_index` (padding) count 0."""
    return _LabelSmoothedCrossEntropy.apply(logits, target, eps, ignore_index)


def projected_label_smoothed_cross_entropy(
    hidden: Tensor,
    weight: Tensor,
    target: Tensor,
    eps: float,
    chunk: int,
    ignore_index: int | None = None,
) -> Tensor:
    """label_smoothed_cross_entropy(hidden @ weight.T, target, eps, ignore_index) for (N, d)
    hidden rows, the (V, d) output matrix and (N,) ids, computed `chunk` rows at a time."""
    return _ProjectedLabelSmoothedCrossEntropy.apply(
        hidden, weight, target, eps, chunk, ignore_index
    )
