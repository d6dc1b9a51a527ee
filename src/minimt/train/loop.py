"""The training run: one loop from the first step to metrics.json; hooks plugged in from outside.

metrics = train(cfg, run_dir, hooks=[...])   # continues cfg.resume when set
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, closing, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import torch
from omegaconf import DictConfig
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter

from minimt.atomic import remove_temp_files
from minimt.checkpoint import resume_checkpoint, run_dir_of
from minimt.config import register_resolvers, validate_config
from minimt.data.batching import Batch
from minimt.data.splits import RunData, prepare_data, training_files
from minimt.data.tokenizer import TokenizerPair
from minimt.encoding_choice import SidePositions
from minimt.errors import MinimtError
from minimt.locks import writing
from minimt.provenance import record_start, session
from minimt.rundir import (
    check_tokenizers,
    keep_tokenizers,
    read_metrics,
    reopen,
    tokenizer_digest,
)
from minimt.runtime import job_num_threads, pick_device, seed_everything, set_num_threads
from minimt.signals import StopRequest
from minimt.train.adapt import RecipeAdapter
from minimt.train.distributed import Distributed
from minimt.train.evaluation import (
    Hook,
    RunContext,
    finish,
    input_magnitudes,
    validate_and_keep_best,
)
from minimt.train.memory import PeakMemory
from minimt.train.progress import (
    Window,
    event_write_faults,
    log_start,
    log_window,
    progress_bar,
)
from minimt.train.state import (
    Clock,
    Resumed,
    TrainState,
    agree_to_stop,
    check_corpus,
    load_resumed,
    resume_training,
    save_training_checkpoint,
    step_batches,
)
from minimt.train.step import (
    Training,
    build_training,
    check_batches_per_step,
    checks_on_host,
    train_step,
)
from minimt.translator import Translator

log = logging.getLogger(__name__)


class Interrupted(Exception):
    """SIGINT/SIGTERM stopped training after a checkpoint was saved; says how to resume.
    `signum`: the stop signal this process received (None: one that reached another process of
    the run)."""

    def __init__(self, message: str, signum: signal.Signals | None):
        super().__init__(message)
        self.signum = signum


class TrainingDiverged(MinimtError, RuntimeError):
    """Too many updates in a row had a non-finite loss or gradient."""


@dataclass(frozen=True)
class StepResult:
    """One optimizer step as train_step reported it; `applied` is read on the host by settle."""

    step: int
    loss_sum: Tensor  # () summed loss of this process's batches
    grad_norm: Tensor  # ()
    applied: Tensor  # () bool: False when the update was skipped (non-finite)
    loss_tokens: int  # this process's target tokens
    tokens: int  # target tokens of all processes


def train(
    cfg: DictConfig,
    run_dir: str | Path,
    hooks: Sequence[Hook] = (),
    stopped_before: Callable[[], signal.Signals | None] | None = None,
) -> dict | None:
    """Train the configured model in `run_dir` (or continue `cfg.resume`), then test it.

    Under torchrun every process calls this; rank 0 returns the metrics also written to
    run_dir/metrics.json, the other ranks None. Raises Interrupted after saving a checkpoint
    when SIGINT/SIGTERM asked training to stop, or when `stopped_before()` names a stop signal
    that came while the run set up (a sweep's, minimt.sweep_signals.stopped). A config composed
    in Python resolves the configs' ${minimt.*} interpolations here as under scripts/train.py.
    """
    register_resolvers()
    positions = validate_config(cfg)
    dist = Distributed.from_env(pick_device(cfg.trainer.device))
    try:
        if not dist.is_main:
            logging.getLogger("minimt").setLevel(logging.WARNING)
        run_dir = Path(dist.broadcast(str(run_dir)))
        with writing_on_main(run_dir, dist), PeakMemory() as memory:
            setup = set_up(cfg, positions, run_dir, dist)
            stop = StopRequest(stopped_before() if stopped_before else None)
            return run_training(cfg, setup, dist, hooks, memory, stop)
    finally:
        dist.close()


def writing_on_main(run_dir: Path, dist: Distributed) -> AbstractContextManager:
    """Rank 0, the one process that writes files, holds `run_dir` (minimt.locks.writing)."""
    if not dist.is_main:
        return nullcontext()
    run_dir.mkdir(parents=True, exist_ok=True)
    return writing(run_dir)


def run_training(
    cfg: DictConfig,
    setup: Setup,
    dist: Distributed,
    hooks: Sequence[Hook],
    memory: PeakMemory,
    stop: StopRequest,
) -> dict | None:
    """This process's part of the run after its `setup`: the loop, the final scores (rank 0);
    `memory` is told the phase (training, test decoding); `stop` (entered here) the signals."""
    data, training, state, translator, adapter, device, run_dir = setup
    trainer, ckpt_dir = cfg.trainer, run_dir / "checkpoints"
    resumed = cfg.resume is not None
    clock, last_saved = Clock(state.train_seconds), state.step if resumed else -1
    window, nonfinite_in_a_row = Window(), 0
    # On CUDA a step's outcome stays on the device until a log, validation or checkpoint step
    # reads them all at once (settle), so that the host queues steps without waiting for each.
    host_check, unsettled = checks_on_host(device), []
    reason, interrupted = "trainer.max_epochs reached", False
    with (
        event_write_faults(run_dir),
        SummaryWriter(run_dir, purge_step=state.step + 1 if resumed else None)
        if dist.is_main
        else nullcontext() as writer,
        stop,
        progress_bar(trainer.max_steps, state.step, dist.is_main) as bar,
        closing(step_batches(data.train_batches, state, dist, trainer)) as steps,
    ):
        run = RunContext(cfg, run_dir, training.model, translator, data, writer, device)
        memory.phase = "training"
        for batches in steps:
            local_tokens = sum(b.num_tgt_tokens for b in batches)
            tokens, stopping = agree_to_stop(
                stop, clock, state, trainer, dist, local_tokens, device
            )
            if stopping:
                reason, interrupted = stopping
                break
            batches = [b.to(device) for b in batches]
            result = update(
                training,
                batches,
                tokens=int(tokens),
                state=state,
                trainer=trainer,
                world_size=dist.world_size,
                host_check=host_check,
            )
            bar.update()
            unsettled.append(result)
            due = (trainer.log_every, trainer.val_every, trainer.save_every)
            if host_check or any(state.step % every == 0 for every in due):
                nonfinite_in_a_row = settle(
                    unsettled, nonfinite_in_a_row, state, window, trainer, ckpt_dir
                )
            if state.step % trainer.log_every == 0:
                if dist.is_main:
                    log_window(writer, bar, window, result.grad_norm, training, state)
                window = Window()
            if state.step % trainer.val_every == 0 and dist.is_main:
                validate_and_keep_best(run, training, state, clock, hooks)
            adapter.after_step(state, clock, training.model, dist)
            if state.step % trainer.save_every == 0:
                save_training_checkpoint(ckpt_dir, training, state, clock, cfg, dist)
                last_saved = state.step
        settle(unsettled, nonfinite_in_a_row, state, window, trainer, ckpt_dir)
        if interrupted:
            save_training_checkpoint(ckpt_dir, training, state, clock, cfg, dist)
            raise interruption(reason, state.step, run_dir, stop)
        stop.at_once()  # the final validation, checkpoint and test scores: stopped where it lands
        log.info("training stopped at step %d: %s", state.step, reason)
        validated = state.val_history and state.val_history[-1]["step"] == state.step
        if dist.is_main and not validated:
            validate_and_keep_best(run, training, state, clock, hooks)
        if last_saved != state.step:
            save_training_checkpoint(ckpt_dir, training, state, clock, cfg, dist)
        if not dist.is_main:
            return None
        memory.phase = "test decoding"
        return finish(run, state, clock, hooks, dist.world_size, reason, memory)


def interruption(reason: str, step: int, run_dir: Path, stop: StopRequest) -> Interrupted:
    """What ends training stopped by a signal (`reason`) at `step`, its checkpoint saved."""
    return Interrupted(
        f"{reason}: stopped at step {step}, checkpoint saved in {run_dir / 'checkpoints'}; "
        f"resume with the same settings plus resume={run_dir}",
        signal.Signals[stop.signal] if stop.signal else None,
    )


def update(
    training: Training,
    batches: list[Batch],
    *,
    tokens: int,
    state: TrainState,
    trainer: DictConfig,
    world_size: int,
    host_check: bool,
) -> StepResult:
    """One optimizer update from this process's `batches` (on the device), `tokens` the target
    tokens of all processes, counted in `state`; its outcome is read later (settle)."""
    loss_sum, grad_norm, applied = train_step(
        training.loss_fn,
        batches,
        scale=world_size / tokens,
        optimizer=training.optimizer,
        scheduler=training.scheduler,
        clip_grad_norm=trainer.clip_grad_norm,
        host_check=host_check,
    )
    state.count_step(tokens, world_size * trainer.accumulate)
    return StepResult(
        step=state.step,
        loss_sum=loss_sum,
        grad_norm=grad_norm,
        applied=applied,
        loss_tokens=sum(batch.num_tgt_tokens for batch in batches),
        tokens=tokens,
    )


class Setup(NamedTuple):
    """What run_training works with, built in the order that keeps every random draw in place."""

    data: RunData
    training: Training
    state: TrainState
    translator: Translator
    adapter: RecipeAdapter
    device: torch.device
    run_dir: Path


def set_up(
    cfg: DictConfig,
    positions: SidePositions,
    run_dir: Path,
    dist: Distributed,
) -> Setup:
    """Seeds, threads and device; the checkpoint of cfg.resume, checked against cfg; the data
    (rank 0 first: it writes the caches; run_data) and the run's tokenizers kept; the model
    (its encodings: `positions`, as validate_config read them), optimizer and loss; the state,
    new or resumed from cfg.resume; the translator; the recipe's adapter
    (minimt.train.adapt); `run_dir`, where the run writes, a finished
    record there reopened (minimt.rundir.reopen)."""
    trainer = cfg.trainer
    seed_everything(trainer.seed)
    set_num_threads(job_num_threads(trainer.num_threads))
    device = dist.device(pick_device(trainer.device))
    if dist.is_main:
        read_metrics(run_dir)  # a damaged record stops the run now, not at its end
    resumed = None if cfg.resume is None else load_resumed(resume_checkpoint(cfg.resume), cfg)
    with dist.main_first():
        data = run_data(cfg, resumed)
    if dist.is_main:
        keep_tokenizers(run_dir, data.tokenizers)
        remove_temp_files(run_dir / "checkpoints")
    vocab = (data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size)
    training = build_training(cfg, *vocab, device, dist.wrap, positions=positions)
    if dist.rank:  # dropout masks differ between ranks (DDP copies rank 0's weights)
        torch.manual_seed(trainer.seed * 1000 + dist.rank)
    state = (
        resume_training(resumed, cfg, training, dist)
        if resumed is not None
        else TrainState(init_magnitudes=input_magnitudes(training.model, cfg))
    )
    state.tokenizer_digest = tokenizer_digest(run_dir) if dist.is_main else ""
    state.corpus = data.splits.train.digests
    state.sessions.append(session(device, from_step=state.step))
    if dist.is_main:
        record_start(run_dir, state.sessions[-1])
    batches_per_epoch = len(data.train_batches.batches(0))
    check_batches_per_step(batches_per_epoch, dist.world_size, trainer.accumulate)
    steps_per_epoch = batches_per_epoch // (dist.world_size * trainer.accumulate)
    adapter = RecipeAdapter(cfg, state, training.model, steps_per_epoch)
    translator = Translator.from_config(training.model, data.tokenizers, cfg, training.precision)
    translator.check_beams([cfg.decoding.test_beam], key="decoding.test_beam")
    if dist.is_main:
        reopen(run_dir)  # every check passed: the run trains from here
        log_start(training, device, trainer, dist.world_size)
    return Setup(data, training, state, translator, adapter, device, run_dir)


def run_data(cfg: DictConfig, resumed: Resumed | None) -> RunData:
    """The run's data (prepare_data). A resumed run keeps the tokenizers in its directory, never
    made again, and the training files its checkpoint recorded (check_corpus)."""
    if resumed is None:
        return prepare_data(cfg)
    check_corpus(resumed, training_files(cfg.data), cfg.resume_new_data)
    tokenizers = TokenizerPair.load(run_dir_of(resumed.path))
    check_tokenizers(tokenizers, resumed.saved, resumed.path)
    return prepare_data(cfg, tokenizers)


def settle(
    results: list[StepResult],
    in_a_row: int,
    state: TrainState,
    window: Window,
    trainer: DictConfig,
    ckpt_dir: Path,
) -> int:
    """Read the `applied` flags of `results` (one host sync for all) and, step by step in order,
    add an applied step to the log window or count a skipped one (check_nonfinite); empties
    `results`. Returns the skipped updates in a row after the last of them."""
    flags = torch.stack([r.applied for r in results]).tolist() if results else []
    for result, applied in zip(results, flags, strict=True):
        if applied:
            in_a_row = 0
            window.add(result.loss_sum, result.loss_tokens, result.tokens)
        else:
            in_a_row += 1
            state.skipped_steps += 1
            check_nonfinite(result, state.skipped_steps, in_a_row, trainer, ckpt_dir)
    results.clear()
    return in_a_row


def check_nonfinite(
    result: StepResult, skipped: int, in_a_row: int, trainer: DictConfig, ckpt_dir: Path
) -> None:
    """Warn about a skipped update; raise TrainingDiverged after too many in a row."""
    log.warning(
        "step %d: non-finite loss or gradient (grad norm %s), update skipped (%d in a row, "
        "%d in all)",
        result.step,
        result.grad_norm.item(),
        in_a_row,
        skipped,
    )
    if in_a_row >= trainer.max_nonfinite_steps:
        raise TrainingDiverged(
            f"{trainer.max_nonfinite_steps} updates in a row had a non-finite loss or gradient "
            f"(the last at step {result.step}): lower trainer.lr (now {trainer.lr}) or use "
            f"trainer.precision=fp32; the last good checkpoints are in {ckpt_dir}"
        )
