"""One optimizer step: the model, Adam with its LR schedule and the summed loss, built from a
config in one place (training and the benchmark share it)."""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from omegaconf import DictConfig
from torch import Tensor, nn

from minimt.config import ConfigError, build_model
from minimt.data.batching import Batch
from minimt.encoding_choice import SidePositions
from minimt.model.loss import label_smoothed_cross_entropy
from minimt.model.transformer import Transformer
from minimt.runtime import precision_autocast, resolve_precision

# Adam's update kernels: one fused kernel over all parameters, multi-tensor (foreach) ops, or a
# Python loop over the parameters (torch's default on CPU).
ADAM_IMPLS = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "for_loop": {"foreach": False},
}


def inverse_sqrt_lr(step: int, warmup_steps: int) -> float:
    """LR factor for update number step+1: linear warmup to 1, then sqrt(warmup / updates)."""
    updates = step + 1
    return min(updates / warmup_steps, math.sqrt(warmup_steps / updates))


class SummedLoss(nn.Module):
    """Label-smoothed cross-entropy summed over a batch's real target tokens (what DDP wraps)."""

    def __init__(self, model: Transformer, label_smoothing: float, autocast: torch.autocast):
        super().__init__()
        self.model, self.label_smoothing, self.autocast = model, label_smoothing, autocast

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor, nonpad_index: Tensor) -> Tensor:
        """(B, S) src, (B, T) tgt_in and tgt_out, (N,) flat positions of tgt_out's non-pad tokens
        (Batch.nonpad_index) -> scalar; logits only for those positions. Selecting them by index,
        not by a mask, keeps the step free of host syncs on a GPU (a mask's row count lives
        there)."""
        target = tgt_out.flatten().index_select(0, nonpad_index)  # (N,)
        with self.autocast:
            hidden = self.model.decode(tgt_in, self.model.encode(src), src)  # (B, T, d_model)
            hidden = hidden.flatten(0, 1).index_select(0, nonpad_index)  # (N, d_model)
            logits = self.model.project(hidden)  # (N, V)
        return label_smoothed_cross_entropy(logits, target, self.label_smoothing)


def make_optimizer(
    model: Transformer, trainer: DictConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Adam (its `trainer.adam_impl` kernel) with linear warmup then inverse-sqrt decay."""
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=trainer.lr,
        betas=tuple(trainer.betas),
        weight_decay=trainer.weight_decay,
        **ADAM_IMPLS[trainer.adam_impl],
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: inverse_sqrt_lr(step, trainer.warmup_steps)
    )
    return optimizer, scheduler


@dataclass(frozen=True)
class Training:
    """What a training step needs, built from the config by build_training."""

    model: Transformer
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LambdaLR
    loss_fn: nn.Module  # SummedLoss, wrapped (DDP) and compiled as configured
    precision: str  # "bf16" or "fp32", resolved for the device
    autocast: torch.autocast


def build_training(
    cfg: DictConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    device: torch.device,
    wrap: Callable[[nn.Module], nn.Module] = lambda module: module,
    *,
    positions: SidePositions | None = None,
) -> Training:
    """The configured model on `device`, its optimizer, LR schedule and loss: `wrap`ped (DDP),
    then compiled with dynamic shapes (batches differ in length) when trainer.compile.
    `positions`: the sides' encodings validate_config returned (else read from cfg.pe)."""
    precision = resolve_precision(cfg.trainer.precision, device)
    autocast = precision_autocast(precision, device)
    model = build_model(cfg, src_vocab_size, tgt_vocab_size, positions).to(device)
    optimizer, scheduler = make_optimizer(model, cfg.trainer)
    loss_fn = wrap(SummedLoss(model, cfg.trainer.label_smoothing, autocast))
    if cfg.trainer.compile:
        loss_fn = torch.compile(loss_fn, dynamic=True)
    return Training(model, optimizer, scheduler, loss_fn, precision, autocast)


def checks_on_host(device: torch.device) -> bool:
    """Whether train_step reads its non-finite check on the host every step: free on a CPU; on
    a GPU it would make the host wait for each step, so there the check stays on the device."""
    return device.type != "cuda"


def train_step(
    loss_fn: nn.Module,
    batches: list[Batch],
    *,
    scale: float,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    clip_grad_norm: float,
    host_check: bool = True,
) -> tuple[Tensor, Tensor, Tensor]:
    """One update from gradients accumulated over `batches`, each summed loss times `scale`.

    Returns () tensors on the parameters' device: the summed loss, the gradient norm and whether
    the update was applied (bool). A non-finite gradient norm (from a non-finite loss or
    gradient) skips the update: weights, Adam's moments and Adam's step count stay as they were.

    host_check reads that check on the host (a sync: free on CPU, a stall on a GPU) and then
    skips the LR schedule's step too. host_check=False with fused Adam keeps it on the device,
    as torch's GradScaler does: optimizer.found_inf = 1.0 makes the fused kernel skip the update
    and take back its step count, while the LR schedule steps all the same, so after k skipped
    updates the learning rate is the schedule's value k updates later than with host_check.
    Other Adam kernels (no found_inf) read the check on the host either way.
    """
    loss_fn.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        with nullcontext() if last or not hasattr(loss_fn, "no_sync") else loss_fn.no_sync():
            loss = loss_fn(batch.src, batch.tgt_in, batch.tgt_out, batch.nonpad_index)
            (loss * scale).backward()
        total = total + loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), clip_grad_norm or math.inf)
    applied = torch.isfinite(grad_norm)  # () bool
    if host_check or not optimizer.defaults.get("fused"):
        if applied:
            optimizer.step()
            scheduler.step()
        return total, grad_norm, applied
    optimizer.found_inf = (~applied).float()
    optimizer.step()
    del optimizer.found_inf
    scheduler.step()
    return total, grad_norm, applied


def check_batches_per_step(n_batches: int, world_size: int, accumulate: int) -> None:
    """A ConfigError where an epoch's `n_batches` cannot fill one step of every process."""
    if n_batches < world_size * accumulate:
        raise ConfigError(
            f"the training data make {n_batches} batches per epoch, fewer than one step "
            f"needs ({world_size} processes x trainer.accumulate={accumulate}): lower "
            "trainer.accumulate or trainer.batch_tokens, use fewer processes, or keep more pairs "
            "(data.max_train_len, data.max_train_pairs, data.train_max_words, data.train_subsample)"
        )
