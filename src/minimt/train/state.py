"""A run's progress (TrainState, Clock), where it goes next (the batches of each step, early
stopping) and its resumable checkpoints: save and resume."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Iterator, Sequence
from contextlib import closing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import NamedTuple

import torch
from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import (
    CheckpointError,
    CheckpointMismatch,
    DamagedCheckpoint,
    averaged_from,
    load_checkpoint,
    load_weights,
    newest_loadable,
    remove_old_checkpoints,
    save_checkpoint,
)
from minimt.config import changed_settings, resume_mismatches
from minimt.data.batching import Batch, prefetched
from minimt.data.corpus import DataError, ParallelFiles
from minimt.data.tokenized import BatchedPairs
from minimt.errors import with_hint
from minimt.migrations import FORMAT_KEY, RUN_FORMAT, changes_since
from minimt.model.transformer import Transformer
from minimt.signals import StopRequest
from minimt.train.distributed import Distributed
from minimt.train.step import Training

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Everything about the run's progress that is not a tensor (saved in every checkpoint)."""

    step: int = 0  # optimizer steps taken, skipped ones included
    epoch: int = 0
    epoch_batches: int = 0  # batches of the current epoch consumed, over all processes
    tgt_tokens: int = 0
    train_seconds: float = 0.0
    skipped_steps: int = 0  # updates skipped for a non-finite loss or gradient (loop.settle)
    best_val_bleu: float = -1.0
    best_step: int = 0
    val_history: list[dict[str, float]] = field(default_factory=list)
    # Seq2SeqEmbedding.input_magnitudes of the untrained model
    init_magnitudes: dict = field(default_factory=dict)
    tokenizer_digest: str = ""  # minimt.rundir.tokenizer_digest: another tokenizer is refused
    # SHA-256 of the training files by side (ParallelFiles.digests): a resume on others is refused
    corpus: dict[str, str] = field(default_factory=dict)
    # minimt.provenance.session of the run's start and of each resume
    sessions: list[dict] = field(default_factory=list)
    # minimt.train.adapt's decision (trainer.adapt): empty until it is taken
    recipe: dict = field(default_factory=dict)

    def count_step(self, tokens: int, batches: int) -> None:
        """One optimizer step done: `tokens` target tokens in `batches` batches (all processes)."""
        self.step += 1
        self.epoch_batches += batches
        self.tgt_tokens += tokens


@dataclass(frozen=True)
class Clock:
    """Training seconds of a run, earlier sessions of a resumed run included."""

    seconds_before: float
    start: float = field(default_factory=time.monotonic)

    def elapsed(self) -> float:
        return self.seconds_before + time.monotonic() - self.start


def patience_reached(
    val_history: Sequence[dict], patience: int | None, min_delta: float
) -> str | None:
    """Why to stop now, or None: the last `patience` validations brought no val-BLEU gain of at
    least `min_delta` (and above 0) over the best validation before them. A pure function of the
    history every checkpoint saves, so a resumed run stops where an uninterrupted one would."""
    if patience is None or len(val_history) <= patience:
        return None
    before, recent = val_history[:-patience], val_history[-patience:]
    reference = max(v["bleu"] for v in before)
    gain = max(v["bleu"] for v in recent) - reference
    if gain > 0 and gain >= min_delta:
        return None
    best = max(val_history, key=lambda v: v["bleu"])  # the first of equal ones
    return (
        f"trainer.patience reached: {patience} validations without a val-BLEU gain of at least "
        f"{min_delta} over {reference:.2f}; best val BLEU {best['bleu']:.2f} at step {best['step']}"
    )


def epoch_steps(
    batches: list[list[int]], consumed: int, rank: int, world_size: int, accumulate: int
) -> list[list[list[int]]]:
    """This rank's micro-batches for each optimizer step left in an epoch.

    A step takes world_size x accumulate consecutive batches after the `consumed` ones; rank r
    takes the r-th `accumulate` of them. The remainder (fewer than one step's worth) is dropped,
    so every rank takes the same number of steps.
    """
    group = world_size * accumulate
    usable = len(batches) - len(batches) % group
    starts = range(consumed, usable - group + 1, group)
    return [batches[s + rank * accumulate : s + (rank + 1) * accumulate] for s in starts]


def step_batches(
    train_batches: BatchedPairs, state: TrainState, dist: Distributed, trainer: DictConfig
) -> Iterator[list[Batch]]:
    """This rank's collated batches for each step, from state's position to trainer.max_epochs.

    Moves `state` to the next epoch when one runs out; collation runs trainer.prefetch batches
    ahead on a background thread, stopped when the generator is closed.
    """
    while state.epoch < trainer.max_epochs:
        batches = train_batches.batches(state.epoch)
        steps = epoch_steps(
            batches, state.epoch_batches, dist.rank, dist.world_size, trainer.accumulate
        )
        collated = ([train_batches.collate(i) for i in step] for step in steps)
        with closing(prefetched(collated, trainer.prefetch)) as epoch:
            yield from epoch
        state.epoch += 1
        state.epoch_batches = 0


def weights_dict(model: Transformer, state: TrainState, cfg: DictConfig) -> dict:
    """Everything needed to rebuild and use the model (best.pt)."""
    return {
        FORMAT_KEY: RUN_FORMAT,
        "model": model.state_dict(),
        "state": asdict(state),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def rng_state() -> dict:
    """This process's random number generator states (python, torch CPU, every CUDA device)."""
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []
    return {"python": random.getstate(), "torch": torch.get_rng_state(), "cuda": cuda}


def set_rng_state(saved: dict) -> None:
    random.setstate(saved["python"])
    torch.set_rng_state(saved["torch"])
    if saved["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["cuda"])


def save_training_checkpoint(
    ckpt_dir: Path,
    training: Training,
    state: TrainState,
    clock: Clock,
    cfg: DictConfig,
    dist: Distributed,
) -> None:
    """checkpoints/step_<N>.pt: everything needed to continue exactly, the training seconds on
    `clock` included. Every rank calls it (its random state is gathered); rank 0 writes it and
    keeps the newest trainer.keep_checkpoints, and those an adapted recipe will average."""
    state.train_seconds = clock.elapsed()
    rng_states = dist.gather(rng_state())
    if not dist.is_main:
        return
    checkpoint = {
        **weights_dict(training.model, state, cfg),
        "optimizer": training.optimizer.state_dict(),
        "scheduler": training.scheduler.state_dict(),
        "rng": rng_states,
    }
    save_checkpoint(ckpt_dir / f"step_{state.step}.pt", checkpoint)
    remove_old_checkpoints(ckpt_dir, cfg.trainer.keep_checkpoints, keep_from=averaged_window(state))


def averaged_window(state: TrainState) -> int | None:
    """The first update whose step checkpoint an adapted recipe may still average (None: not
    adapted): from its projected window on, but never before the window of the updates already
    made, which a run past its projection only moves later."""
    recipe = state.recipe
    if not recipe.get("adapted"):
        return None
    return max(recipe["average_from"], averaged_from(state.step, recipe["average"]))


def not_saved_for_an_exact_resume(saved: dict) -> list[str]:
    """What a checkpoint of an older run format lacks to continue exactly where it stopped."""
    missing = [] if "rng" in saved else ["random state (dropout restarts from the seed)"]
    if "epoch_batches" not in saved["state"]:
        missing.append("position in its epoch (the epoch restarts)")
    return missing


def resuming_instead(path: Path) -> str:
    """What to do when the step checkpoint at `path` does not load."""
    older = newest_loadable(path.parent, other_than=path)
    if older is None:
        return "no other step checkpoint loads: start the run again, without resume="
    return f"resume={older} continues from the newest that loads"


class Resumed(NamedTuple):
    """The step checkpoint a run resumes from: its path and what it holds."""

    path: Path
    saved: dict


def load_resumed(path: Path, cfg: DictConfig) -> Resumed:
    """The step checkpoint at `path`, refused where it holds weights only or where a setting that
    the weights or the data order depend on (RESUME_KEYS, the pe section) differs from cfg's."""
    with with_hint(lambda: resuming_instead(path), DamagedCheckpoint):
        saved = load_checkpoint(path)
    if "optimizer" not in saved:
        raise CheckpointError(
            f"{path} holds model weights only (best.pt / averaged.pt): resume from the run "
            "directory or one of its checkpoints/step_<N>.pt"
        )
    problems = resume_mismatches(saved["config"], cfg)
    if problems:
        raise CheckpointMismatch(
            f"cannot resume from {path}: these settings differ from the checkpoint's "
            "(resume with the checkpoint's values, or start a new run):\n  " + "\n  ".join(problems)
        )
    return Resumed(path, saved)


def check_corpus(resumed: Resumed, train: ParallelFiles, resume_new_data: bool) -> None:
    """The training files `train` must be those the checkpoint's run trained on (its tokenizer
    and token ids came from them): other ones are refused in one line naming them, or, with
    `resume_new_data`, named in a warning (the run's own tokenizer encodes them)."""
    recorded = resumed.saved["state"].get("corpus")
    if not recorded:
        log.info("%s recorded no digest of its training files (an older run format)", resumed.path)
        return
    files = {"src": train.src, "tgt": train.tgt}
    changed = [
        str(files[side]) for side, digest in train.digests.items() if recorded.get(side) != digest
    ]
    if not changed:
        return
    what = f"the training files changed since {resumed.path} was saved: {', '.join(changed)}"
    if resume_new_data:
        log.warning("%s; resume_new_data=true: the run's own tokenizer encodes them", what)
        return
    raise DataError(
        f"cannot resume: {what} (the run's tokenizer and token ids came from them as they were): "
        "start a new run on them, or continue this one with resume_new_data=true (its own "
        "tokenizer encodes the new pairs)"
    )


def resume_training(
    resumed: Resumed, cfg: DictConfig, training: Training, dist: Distributed
) -> TrainState:
    """Load the weights, optimizer, schedule and random state `resumed` holds; its TrainState.

    Every setting but those load_resumed checked may change, each one that does named in one
    warning. A checkpoint of an older run format is read in today's (minimt.migrations), and one
    that saved too little to continue exactly says so.
    """
    path, saved = resumed
    if "saved_format" in saved:
        log.info(
            "%s was saved in run format %d (today's: %d), read in today's spelling: %s",
            path,
            saved["saved_format"],
            RUN_FORMAT,
            "; ".join(changes_since(saved["saved_format"])),
        )
    changed = changed_settings(saved["config"], cfg)
    if changed:
        log.warning(
            "resuming with settings that differ from the checkpoint's: %s", "; ".join(changed)
        )
    inexact = not_saved_for_an_exact_resume(saved)
    if inexact:
        log.warning(
            "%s cannot continue exactly: it saved no %s (an older run format); continuing "
            "from its weights, optimizer and schedule",
            path,
            " and no ".join(inexact),
        )
    load_weights(training.model, saved["model"], path)
    training.optimizer.load_state_dict(saved["optimizer"])
    training.scheduler.load_state_dict(saved["scheduler"])
    state = TrainState(**saved["state"])
    if len(saved.get("rng", [])) == dist.world_size:
        set_rng_state(saved["rng"][dist.rank])
    else:
        if "rng" in saved:
            log.warning(
                "checkpoint saved by %d processes, resuming with %d: random streams (dropout) "
                "restart from the seed, so the run will not match an uninterrupted one exactly",
                len(saved["rng"]),
                dist.world_size,
            )
        torch.manual_seed(cfg.trainer.seed * 1000 + dist.rank + state.step)
    log.info("resumed from %s at step %d (epoch %d)", path, state.step, state.epoch + 1)
    return state


def agree_to_stop(
    stop: StopRequest,
    clock: Clock,
    state: TrainState,
    trainer: DictConfig,
    dist: Distributed,
    local_tokens: int,
    device: torch.device,
) -> tuple[float, tuple[str, bool] | None]:
    """Before a step, every process at once: the step's target tokens over all processes, and
    why to stop (with whether a signal asked for it), or None. A signal or trainer.max_minutes
    on any process stops all; rank 0's validations alone decide patience."""
    if state.step >= trainer.max_steps:  # every process has taken as many steps
        return 0.0, ("trainer.max_steps reached", False)
    late = clock.elapsed() >= trainer.max_minutes * 60
    converged = (
        patience_reached(state.val_history, trainer.patience, trainer.min_delta)
        if dist.is_main
        else None
    )
    tokens, signalled, late, stop_early = dist.sum(
        [local_tokens, stop.signal is not None, late, converged is not None], device
    )
    if signalled or late:
        signal_name = stop.signal or "a signal to another process"
        return tokens, (
            signal_name if signalled else "trainer.max_minutes reached",
            bool(signalled),
        )
    if stop_early:
        return tokens, (converged or "trainer.patience reached (rank 0's validations)", False)
    return tokens, None
