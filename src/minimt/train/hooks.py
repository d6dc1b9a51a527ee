"""What a training run shows to code plugged into it from outside (the embedding study)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig
from torch.utils.tensorboard import SummaryWriter

from minimt.data.splits import RunData
from minimt.model.transformer import Transformer
from minimt.translator import Translator


@dataclass(frozen=True)
class RunContext:
    """A run's config, folder, model, data and TensorBoard writer, as rank 0 holds them."""

    cfg: DictConfig
    run_dir: Path
    model: Transformer
    translator: Translator
    data: RunData
    writer: SummaryWriter
    device: torch.device


class Hook(Protocol):
    """Called by rank 0 only. Neither call may change the weights (both run in eval mode)."""

    def on_validation(self, run: RunContext, step: int) -> None:
        """After each validation is logged."""

    def on_finish(self, run: RunContext, metrics: dict) -> None:
        """After metrics.json is written; keys added to `metrics` are written to it too."""
