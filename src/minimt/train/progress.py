"""What a run reports while it trains: the progress bar, log lines, TensorBoard scalars."""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import tensorboard
import torch
import torch.utils.tensorboard
from omegaconf import DictConfig
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from minimt.atomic import write_error
from minimt.data.corpus import Pairs
from minimt.errors import MinimtError
from minimt.train.state import TrainState
from minimt.train.step import Training

log = logging.getLogger(__name__)

SAMPLES = 3  # validation sentences shown as text at each validation
# The code that writes event files: an OSError raised in it is an event write's.
EVENT_WRITERS = tuple(
    str(Path(package.__file__).parent) + os.sep
    for package in (tensorboard, torch.utils.tensorboard)
)


@contextmanager
def event_write_faults(log_dir: Path) -> Iterator[None]:
    """Inside, an OSError that TensorBoard raises writing event files (a full disk, a refused
    write) is a WriteError naming the file, so that the run stops with one line like a failed
    checkpoint. TensorBoard writes on a thread of its own and raises its failure at the next
    call; that thread's printed traceback is left out (the error is reported here, once)."""
    thread_hook = threading.excepthook

    def quiet(args: threading.ExceptHookArgs) -> None:
        if not (isinstance(args.exc_value, OSError) and _in_event_writer(args.exc_traceback)):
            thread_hook(args)

    threading.excepthook = quiet
    try:
        yield
    except OSError as error:
        if isinstance(error, MinimtError) or not _in_event_writer(error.__traceback__):
            raise
        named = error.filename
        path = Path(os.fsdecode(named)) if named else log_dir / "events.out.tfevents.*"
        raise write_error(path, error) from error
    finally:
        threading.excepthook = thread_hook


def _in_event_writer(trace: TracebackType | None) -> bool:
    while trace is not None:
        if trace.tb_frame.f_code.co_filename.startswith(EVENT_WRITERS):
            return True
        trace = trace.tb_next
    return False


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


def log_scalars(writer: SummaryWriter, split: str, values: dict[str, float], step: int) -> None:
    """Each of `values` (name -> value, measured on `split`) as "<split>/<name>": "train/loss",
    "val/bleu", "test/test_2017_flickr/bleu"."""
    for name, value in values.items():
        writer.add_scalar(f"{split}/{name}", value, step)


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
