"""What a run reports while it trains: the progress bar, log lines, TensorBoard scalars."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from omegaconf import DictConfig
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from minimt.data.corpus import Pairs
from minimt.train.state import TrainState
from minimt.train.step import Training

log = logging.getLogger(__name__)

SAMPLES = 3  # validation sentences shown as text at each validation


def progress_bar(total: int, initial: int, show: bool) -> tqdm:
    disable = None if show else True  # None: shown on a terminal only
    return tqdm(total=total, initial=initial, disable=disable, dynamic_ncols=True, desc="train")


def log_start(
    training: Training, device: torch.device, trainer: DictConfig, world_size: int
) -> None:
    log.info(
        "model: %s parameters, device %s, precision %s, %d torch threads",
        f"{training.model.num_parameters():,}",
        device,
        training.precision,
        torch.get_num_threads(),
    )
    log.info(
        "effective batch: up to %d tokens x %d micro-batches x %d processes per update",
        trainer.batch_tokens,
        trainer.accumulate,
        world_size,
    )


@dataclass
class Window:
    """Loss and throughput over the steps since the last log line; syncs only when read."""

    loss_sum: Tensor | float = 0.0  # on the training device
    loss_tokens: int = 0  # this process's target tokens in applied updates
    tokens: int = 0  # target tokens of all processes
    start: float = field(default_factory=time.monotonic)

    def add(self, loss_sum: Tensor, loss_tokens: int, tokens: int) -> None:
        self.loss_sum = self.loss_sum + loss_sum
        self.loss_tokens += loss_tokens
        self.tokens += tokens

    def mean_loss(self) -> float:
        return float(self.loss_sum) / self.loss_tokens if self.loss_tokens else math.nan

    def tokens_per_sec(self) -> float:
        return self.tokens / (time.monotonic() - self.start)


def log_scalars(writer: SummaryWriter, prefix: str, values: dict[str, float], step: int) -> None:
    for name, value in values.items():
        writer.add_scalar(f"{prefix}/{name}", value, step)


def log_window(
    writer: SummaryWriter,
    bar: tqdm,
    window: Window,
    grad_norm: Tensor,
    training: Training,
    state: TrainState,
) -> None:
    mean_loss, lr = window.mean_loss(), training.scheduler.get_last_lr()[0]
    values = {
        "loss": mean_loss,
        "lr": lr,
        "grad_norm": grad_norm.item(),
        "tokens_per_sec": window.tokens_per_sec(),
    }
    log_scalars(writer, "train", values, state.step)
    bar.set_postfix(
        loss=f"{mean_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{values['tokens_per_sec']:,.0f}"
    )
    log.info(
        "step %d | epoch %d | loss %.3f | lr %.2e | grad norm %.2f | %.0f tgt tok/s",
        state.step,
        state.epoch + 1,
        *values.values(),
    )


def markdown_cell(text: str) -> str:
    """`text` as literal markdown table-cell content (its own markup characters escaped)."""
    return "".join("\\" + c if c in "\\`*_[]|" else c for c in text)


def samples_table(sources: Sequence[str], references: Sequence[str], hyps: Sequence[str]) -> str:
    """A markdown table with one row per sentence: its source, reference and hypothesis."""
    rows = ["| | source | reference | hypothesis |", "|---|---|---|---|"]
    for i, triple in enumerate(zip(sources, references, hyps, strict=True), start=1):
        rows.append(f"| {i} | " + " | ".join(markdown_cell(text) for text in triple) + " |")
    return "\n".join(rows)


def log_samples(writer: SummaryWriter, pairs: Pairs, hyps: Sequence[str], step: int) -> None:
    """val/samples: the first SAMPLES validation sentences as source / reference / hypothesis
    (TensorBoard's TEXT tab, one table per validation)."""
    sources, references = pairs
    table = samples_table(sources[:SAMPLES], references[:SAMPLES], hyps[:SAMPLES])
    writer.add_text("val/samples", table, step)
