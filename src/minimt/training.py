"""The training run: the loop, validation, resumable checkpoints, signals, final test."""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator
from contextlib import closing, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from minimt import views
from minimt.atomic import remove_temp_files
from minimt.checkpoint import (
    ARCHITECTURE_KEYS,
    CheckpointError,
    CheckpointMismatch,
    config_mismatches,
    load_checkpoint,
    load_weights,
    remove_old_checkpoints,
    resume_checkpoint,
    save_checkpoint,
    save_json,
)
from minimt.config import ConfigError, validate_config
from minimt.data import Batch, BatchedPairs, prefetched
from minimt.distributed import Distributed
from minimt.interrupt import StopRequest
from minimt.lengths import join_consecutive
from minimt.loss import label_smoothed_cross_entropy
from minimt.metrics import CorpusScores, corpus_scores
from minimt.model import Transformer
from minimt.rundata import Pairs, RunData, prepare_data
from minimt.rundir import build_model, pick_device, precision_autocast, resolve_precision
from minimt.tokenizer import PAD_ID
from minimt.translator import Translator

log = logging.getLogger(__name__)

# Settings a resumed run must share with its checkpoint: the weights, the data and its order.
RESUME_KEYS = (
    *ARCHITECTURE_KEYS,
    "data.name",
    "data.src_lang",
    "data.tgt_lang",
    "data.max_train_pairs",
    "data.max_train_len",
    "trainer.seed",
    "trainer.batch_tokens",
)


class Interrupted(Exception):
    """SIGINT/SIGTERM stopped training after a checkpoint was saved; says how to resume."""


class TrainingDiverged(RuntimeError):
    """Too many updates in a row had a non-finite loss or gradient."""


@dataclass
class TrainState:
    """Everything about the run's progress that is not a tensor (saved in every checkpoint)."""

    step: int = 0  # optimizer steps taken, skipped ones included
    epoch: int = 0
    epoch_batches: int = 0  # batches of the current epoch consumed, over all processes
    tgt_tokens: int = 0
    train_seconds: float = 0.0
    skipped_steps: int = 0  # updates skipped for a non-finite loss or gradient
    best_val_bleu: float = -1.0
    best_step: int = 0
    val_history: list[dict[str, float]] = field(default_factory=list)


def inverse_sqrt_lr(step: int, warmup_steps: int) -> float:
    """LR factor for update number step+1: linear warmup to 1, then sqrt(warmup / updates)."""
    updates = step + 1
    return min(updates / warmup_steps, math.sqrt(warmup_steps / updates))


class SummedLoss(nn.Module):
    """Label-smoothed cross-entropy summed over a batch's real target tokens (what DDP wraps)."""

    def __init__(self, model: Transformer, label_smoothing: float, autocast: torch.autocast):
        super().__init__()
        self.model, self.label_smoothing, self.autocast = model, label_smoothing, autocast

    def forward(self, src: Tensor, tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
        """(B, S) src, (B, T) tgt_in and tgt_out -> scalar; logits only for non-pad positions."""
        real = tgt_out != PAD_ID  # (B, T)
        with self.autocast:
            hidden = self.model.decode(tgt_in, self.model.encode(src), src)  # (B, T, d_model)
            logits = self.model.project(hidden[real])  # (N, V)
        return label_smoothed_cross_entropy(logits, tgt_out[real], self.label_smoothing)


def training_loss(
    model: Transformer,
    trainer: DictConfig,
    autocast: torch.autocast,
    wrap: Callable[[nn.Module], nn.Module] = lambda module: module,
) -> nn.Module:
    """The summed label-smoothed loss of a training step, `wrap`ped (DDP), then through
    torch.compile (shapes dynamic: batches differ in length) when `trainer.compile`."""
    loss_fn = wrap(SummedLoss(model, trainer.label_smoothing, autocast))
    return torch.compile(loss_fn, dynamic=True) if trainer.compile else loss_fn


def train_step(
    loss_fn: nn.Module,
    batches: list[Batch],
    scale: float,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    clip_grad_norm: float,
) -> tuple[Tensor, Tensor, bool]:
    """One update from gradients accumulated over `batches`, each summed loss times `scale`.

    Returns (summed loss, grad norm, whether the update was applied): a non-finite gradient
    norm (from a non-finite loss or gradient) skips the update and the LR schedule step.
    """
    loss_fn.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i, batch in enumerate(batches):
        last = i == len(batches) - 1
        with nullcontext() if last or not hasattr(loss_fn, "no_sync") else loss_fn.no_sync():
            loss = loss_fn(batch.src, batch.tgt_in, batch.tgt_out)
            (loss * scale).backward()
        total = total + loss.detach()
    grad_norm = torch.nn.utils.clip_grad_norm_(loss_fn.parameters(), clip_grad_norm or math.inf)
    applied = bool(torch.isfinite(grad_norm))  # the one host sync per step
    if applied:
        optimizer.step()
        scheduler.step()
    return total, grad_norm, applied


@torch.no_grad()
def validation_nll(model: Transformer, batches: BatchedPairs, autocast: torch.autocast) -> float:
    """Mean negative log-likelihood per target token (no label smoothing): exp() is perplexity."""
    model.eval()
    nll = SummedLoss(model, 0.0, autocast)
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    for batch in batches.iterate():
        batch = batch.to(device)
        total += nll(batch.src, batch.tgt_in, batch.tgt_out)
        count += batch.num_tgt_tokens
    return total.item() / count


def score(
    translator: Translator, pairs: Pairs, beam: int, length_penalty: float
) -> tuple[CorpusScores, list[str]]:
    """Translate the source side of `pairs` and score it against the raw references."""
    hyps = translator.translate(pairs[0], beam=beam, length_penalty=length_penalty)
    return corpus_scores(hyps, pairs[1]), hyps


def weights_dict(model: Transformer, state: TrainState, cfg: DictConfig) -> dict:
    """Everything needed to rebuild and use the model (best.pt)."""
    return {
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


def log_scalars(writer: SummaryWriter, prefix: str, values: dict[str, float], step: int) -> None:
    for name, value in values.items():
        writer.add_scalar(f"{prefix}/{name}", value, step)


# Adam's update kernels: one fused kernel over all parameters, multi-tensor (foreach) ops, or a
# Python loop over the parameters (torch's default on CPU).
ADAM_IMPLS = {
    "fused": {"fused": True},
    "foreach": {"foreach": True},
    "for_loop": {"foreach": False},
}


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


def validate(
    translator: Translator, data: RunData, autocast: torch.autocast
) -> tuple[float, CorpusScores]:
    """Validation NLL per target token, and corpus scores of cached greedy decoding."""
    nll = validation_nll(translator.model, data.val_batches, autocast)
    scores, _ = score(translator, data.splits.val, beam=1, length_penalty=1.0)
    return nll, scores


def score_test_sets(translator: Translator, data: RunData, cfg: DictConfig, run_dir: Path) -> dict:
    """Scores per test set with beam decoding.test_beam (hypotheses in hyps.<name>.txt)."""
    beam, alpha = cfg.decoding.test_beam, cfg.decoding.length_penalty
    results = {}
    for name, pairs in data.splits.tests.items():
        scores, hyps = score(translator, pairs, beam, alpha)
        (run_dir / f"hyps.{name}.txt").write_text("".join(h + "\n" for h in hyps))
        results[name] = {**scores.as_dict(), "beam": beam, "length_penalty": alpha}
        log.info(
            "%s (beam %d): BLEU %.2f chrF %.2f | %s",
            name,
            beam,
            scores.bleu,
            scores.chrf,
            scores.bleu_signature,
        )
    return results


def score_long_inputs(translator: Translator, data: RunData, joins: list[int]) -> dict:
    """Greedy scores on each test set with k consecutive sentences joined into one input."""
    results: dict[str, dict] = {}
    for name, pairs in data.splits.tests.items():
        results[name] = {}
        for k in joins:
            joined = join_consecutive(pairs, k)
            scores, _ = score(translator, joined, beam=1, length_penalty=1.0)
            words = sum(len(line.split()) for line in joined[0]) / max(len(joined[0]), 1)
            results[name][str(k)] = {
                "bleu": scores.bleu,
                "chrf": scores.chrf,
                "mean_src_words": words,
            }
        log.info(
            "%s, k sentences joined: %s",
            name,
            ", ".join(f"k={k} BLEU {r['bleu']:.2f}" for k, r in results[name].items()),
        )
    return results


def train(cfg: DictConfig, run_dir: str | Path) -> dict | None:
    """Train the configured model in `run_dir` (or continue `cfg.resume`), then test it.

    Under torchrun every process calls this; rank 0 returns the metrics also written to
    run_dir/metrics.json, the other ranks None. Raises Interrupted after saving a checkpoint
    when SIGINT/SIGTERM asked training to stop.
    """
    validate_config(cfg)
    dist = Distributed.from_env(pick_device(cfg.trainer.device))
    try:
        if not dist.is_main:
            logging.getLogger("minimt").setLevel(logging.WARNING)
        return Trainer(cfg, Path(dist.broadcast(str(run_dir))), dist).fit()
    finally:
        dist.close()


class Trainer:
    """One run's model, optimizer, data and progress; rank 0 alone validates, logs and saves."""

    def __init__(self, cfg: DictConfig, run_dir: Path, dist: Distributed):
        self.cfg, self.run_dir, self.dist = cfg, run_dir, dist
        trainer = cfg.trainer
        random.seed(trainer.seed)
        torch.manual_seed(trainer.seed)
        if trainer.num_threads:
            torch.set_num_threads(trainer.num_threads)
        self.device = dist.device(pick_device(trainer.device))
        self.precision = resolve_precision(trainer.precision, self.device)
        self.autocast = precision_autocast(self.precision, self.device)
        with dist.main_first():
            self.data = prepare_data(cfg)
        if dist.is_main:
            self.data.tokenizers.save(run_dir)
        # a few fixed validation sentences whose cross-attention each validation draws
        n_val = len(self.data.val_batches.pairs)
        self.attention_batch = self.data.val_batches.collate(range(min(4, n_val)))
        vocab = (self.data.tokenizers.src_vocab_size, self.data.tokenizers.tgt_vocab_size)
        self.model = build_model(cfg, *vocab).to(self.device)
        if dist.rank:  # dropout masks differ between ranks (DDP copies rank 0's weights)
            torch.manual_seed(trainer.seed * 1000 + dist.rank)
        self.optimizer, self.scheduler = make_optimizer(self.model, trainer)
        self.loss_fn = training_loss(self.model, trainer, self.autocast, dist.wrap)
        self.translator = Translator.from_config(
            self.model, self.data.tokenizers, cfg, self.precision
        )
        self.state, self.ckpt_dir = TrainState(), run_dir / "checkpoints"
        self.resumed_from: Path | None = None
        if cfg.resume:
            self._resume(resume_checkpoint(cfg.resume))
        self._check_batches_per_epoch()
        self.last_saved_step = self.state.step if self.resumed_from else -1
        self.nonfinite_in_a_row = 0
        self.writer: SummaryWriter | None = None

    @property
    def batches_per_step(self) -> int:
        return self.dist.world_size * self.cfg.trainer.accumulate

    def _check_batches_per_epoch(self) -> None:
        n_batches = len(self.data.train_batches.batches(0))
        if n_batches < self.batches_per_step:
            raise ConfigError(
                f"the training data make {n_batches} batches per epoch, fewer than one step "
                f"needs ({self.dist.world_size} processes x trainer.accumulate="
                f"{self.cfg.trainer.accumulate}): lower trainer.accumulate or "
                "trainer.batch_tokens, or use fewer processes"
            )

    def _resume(self, path: Path) -> None:
        saved = load_checkpoint(path)
        if "optimizer" not in saved:
            raise CheckpointError(
                f"{path} holds model weights only (best.pt / averaged.pt): resume from the run "
                "directory or one of its checkpoints/step_<N>.pt"
            )
        problems = config_mismatches(saved["config"], self.cfg, RESUME_KEYS)
        if problems:
            raise CheckpointMismatch(
                f"cannot resume from {path}: these settings differ from the checkpoint's "
                "(resume with the checkpoint's values, or start a new run):\n  "
                + "\n  ".join(problems)
            )
        changed = config_mismatches(saved["config"], self.cfg, _trainer_keys(self.cfg))
        if changed:
            log.info("resuming with changed settings: %s", "; ".join(changed))
        load_weights(self.model, saved["model"], path)
        self.optimizer.load_state_dict(saved["optimizer"])
        self.scheduler.load_state_dict(saved["scheduler"])
        self.state = TrainState(**saved["state"])
        if len(saved["rng"]) == self.dist.world_size:
            set_rng_state(saved["rng"][self.dist.rank])
        else:
            log.warning(
                "checkpoint saved by %d processes, resuming with %d: random streams (dropout) "
                "restart from the seed, so the run will not match an uninterrupted one exactly",
                len(saved["rng"]),
                self.dist.world_size,
            )
            torch.manual_seed(self.cfg.trainer.seed * 1000 + self.dist.rank + self.state.step)
        self.resumed_from = path
        log.info("resumed from %s at step %d (epoch %d)", path, self.state.step, self.state.epoch)

    def fit(self) -> dict | None:
        trainer, main = self.cfg.trainer, self.dist.is_main
        if main:
            self._log_start()
        purge_step = self.state.step + 1 if self.resumed_from else None
        self.seconds_before, self.session_start = self.state.train_seconds, time.monotonic()
        deadline = self.session_start + trainer.max_minutes * 60 - self.seconds_before
        with (
            SummaryWriter(self.run_dir, purge_step=purge_step) if main else nullcontext() as writer,
            StopRequest() as stop,
            tqdm(
                total=trainer.max_steps,
                initial=self.state.step,
                disable=None if main else True,
                dynamic_ncols=True,
                desc="train",
            ) as self.progress,
        ):
            self.writer = writer
            reason, interrupted = self._train_loop(stop, deadline)
            if interrupted:
                self._save()
                raise Interrupted(self._resume_hint(reason))
            log.info("training stopped at step %d: %s", self.state.step, reason)
            if not self.state.val_history or self.state.val_history[-1]["step"] != self.state.step:
                self._validate()
            if self.last_saved_step != self.state.step:
                self._save()
            return self._finish() if main else None

    def _log_start(self) -> None:
        trainer = self.cfg.trainer
        remove_temp_files(self.ckpt_dir)
        log.info(
            "model: %s parameters, device %s, precision %s",
            f"{self.model.num_parameters():,}",
            self.device,
            self.precision,
        )
        log.info(
            "effective batch: up to %d tokens x %d micro-batches x %d processes per update",
            trainer.batch_tokens,
            trainer.accumulate,
            self.dist.world_size,
        )

    def _train_loop(self, stop: StopRequest, deadline: float) -> tuple[str, bool]:
        """Steps until a budget runs out or a signal arrives: (why it stopped, by a signal?)."""
        trainer = self.cfg.trainer
        self.window = Window()
        while self.state.epoch < trainer.max_epochs:
            all_batches = self.data.train_batches.batches(self.state.epoch)
            steps = epoch_steps(
                all_batches,
                self.state.epoch_batches,
                self.dist.rank,
                self.dist.world_size,
                trainer.accumulate,
            )
            collated = ([self.data.train_batches.collate(i) for i in step] for step in steps)
            with closing(prefetched(collated, trainer.prefetch)) as epoch:
                if stopped := self._run_epoch(epoch, stop, deadline):
                    return stopped
            self.state.epoch += 1
            self.state.epoch_batches = 0
        return "trainer.max_epochs reached", False

    def _run_epoch(
        self, epoch: Iterator[list[Batch]], stop: StopRequest, deadline: float
    ) -> tuple[str, bool] | None:
        """The epoch's remaining steps (each a list of batches); (why, by a signal?) if training
        must stop before the epoch ends."""
        trainer = self.cfg.trainer
        for batches in epoch:
            if self.state.step >= trainer.max_steps:
                return "trainer.max_steps reached", False
            local_tokens = sum(b.num_tgt_tokens for b in batches)
            tokens, signalled, late = self.dist.sum(
                [local_tokens, stop.signal is not None, time.monotonic() >= deadline],
                self.device,
            )
            if signalled:
                return stop.signal or "a signal to another process", True
            if late:
                return "trainer.max_minutes reached", False
            batches = [b.to(self.device) for b in batches]
            loss_sum, grad_norm, applied = train_step(
                self.loss_fn,
                batches,
                self.dist.world_size / tokens,
                self.optimizer,
                self.scheduler,
                trainer.clip_grad_norm,
            )
            self._count_step(applied, int(tokens), grad_norm)
            if applied:
                self.window.add(loss_sum, local_tokens, int(tokens))
            self._after_step(grad_norm)
        return None

    def _count_step(self, applied: bool, tokens: int, grad_norm: Tensor) -> None:
        self.state.step += 1
        self.state.epoch_batches += self.batches_per_step
        self.state.tgt_tokens += tokens
        self.progress.update()
        if applied:
            self.nonfinite_in_a_row = 0
            return
        self.state.skipped_steps += 1
        self.nonfinite_in_a_row += 1
        log.warning(
            "step %d: non-finite loss or gradient (grad norm %s), update skipped (%d in a row, "
            "%d in all)",
            self.state.step,
            grad_norm.item(),
            self.nonfinite_in_a_row,
            self.state.skipped_steps,
        )
        limit = self.cfg.trainer.max_nonfinite_steps
        if self.nonfinite_in_a_row >= limit:
            raise TrainingDiverged(
                f"{limit} updates in a row had a non-finite loss or gradient (the last at step "
                f"{self.state.step}): lower trainer.lr (now {self.cfg.trainer.lr}) or use "
                f"trainer.precision=fp32; the last good checkpoints are in {self.ckpt_dir}"
            )

    def _after_step(self, grad_norm: Tensor) -> None:
        """Log (then start a new window), validate and save on their schedules."""
        trainer, step = self.cfg.trainer, self.state.step
        if step % trainer.log_every == 0:
            if self.dist.is_main:
                self._log_window(self.window, grad_norm)
            self.window = Window()
        if step % trainer.val_every == 0:
            self._validate()
        if step % trainer.save_every == 0:
            self._save()

    def _log_window(self, window: Window, grad_norm: Tensor) -> None:
        mean_loss, lr = window.mean_loss(), self.scheduler.get_last_lr()[0]
        values = {
            "loss": mean_loss,
            "lr": lr,
            "grad_norm": grad_norm.item(),
            "tokens_per_sec": window.tokens_per_sec(),
        }
        log_scalars(self.writer, "train", values, self.state.step)
        self.progress.set_postfix(
            loss=f"{mean_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{values['tokens_per_sec']:,.0f}"
        )
        log.info(
            "step %d | epoch %d | loss %.3f | lr %.2e | grad norm %.2f | %.0f tgt tok/s",
            self.state.step,
            self.state.epoch + 1,
            *values.values(),
        )

    def _validate(self) -> None:
        """Rank 0: val loss and greedy BLEU, logged; best.pt when BLEU improves."""
        if not self.dist.is_main:
            return
        state, seconds = self.state, self._elapsed()  # the validation itself not included
        nll, scores = validate(self.translator, self.data, self.autocast)
        entry = {"step": state.step, "seconds": seconds, "loss": nll, "bleu": scores.bleu}
        state.val_history.append(entry)
        values = {"loss": nll, "ppl": math.exp(min(nll, 50)), "bleu": scores.bleu}
        log_scalars(self.writer, "val", values | {"chrf": scores.chrf}, state.step)
        self._log_views()
        log.info(
            "step %d | val loss %.3f | val BLEU %.2f | chrF %.2f",
            state.step,
            nll,
            scores.bleu,
            scores.chrf,
        )
        if scores.bleu > state.best_val_bleu:
            state.best_val_bleu, state.best_step = scores.bleu, state.step
            save_checkpoint(self.ckpt_dir / "best.pt", weights_dict(self.model, state, self.cfg))

    def _log_views(self) -> None:
        """TensorBoard images of the positional table, embedding norms, cross-attention."""
        batch, step = self.attention_batch, self.state.step
        views.log_positional_views(self.writer, self.model, step)
        views.log_embedding_norms(self.writer, self.model, batch.src.to(self.device), step)
        views.log_cross_attention(
            self.writer, self.model, batch.src, batch.tgt_in, step, self.data.tokenizers
        )

    def _save(self) -> None:
        """checkpoints/step_<N>.pt: everything needed to continue exactly (all ranks call it)."""
        rng_states = self.dist.gather(rng_state())
        self.last_saved_step = self.state.step
        if not self.dist.is_main:
            return
        self.state.train_seconds = self._elapsed()
        checkpoint = {
            **weights_dict(self.model, self.state, self.cfg),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "rng": rng_states,
        }
        save_checkpoint(self.ckpt_dir / f"step_{self.state.step}.pt", checkpoint)
        remove_old_checkpoints(self.ckpt_dir, self.cfg.trainer.keep_checkpoints)

    def _elapsed(self) -> float:
        """Training seconds of this run, earlier sessions of a resumed run included."""
        return self.seconds_before + time.monotonic() - self.session_start

    def _resume_hint(self, signal_name: str) -> str:
        return (
            f"{signal_name}: stopped at step {self.state.step}, checkpoint saved in "
            f"{self.ckpt_dir}; resume with the same settings plus resume={self.run_dir}"
        )

    def _finish(self) -> dict:
        """Rank 0: score the best checkpoint on the test sets, write metrics.json."""
        state, cfg = self.state, self.cfg
        state.train_seconds = self._elapsed()
        log.info("scoring the best checkpoint (step %d) on the test sets", state.best_step)
        best = self.ckpt_dir / "best.pt"
        load_weights(self.model, load_checkpoint(best)["model"], best)
        tests = score_test_sets(self.translator, self.data, cfg, self.run_dir)
        for i, (name, result) in enumerate(tests.items()):  # the first test set is the headline
            result["checkpoint"] = "best"
            prefix = "test" if i == 0 else f"test/{name}"
            values = {"bleu": result["bleu"], "chrf": result["chrf"]}
            log_scalars(self.writer, prefix, values, state.step)
        long_inputs = score_long_inputs(self.translator, self.data, list(cfg.decoding.long_inputs))
        metrics = {
            "steps": state.step,
            "epochs_completed": state.epoch,
            "precision": self.precision,
            "world_size": self.dist.world_size,
            "accumulate": cfg.trainer.accumulate,
            "train_seconds": state.train_seconds,
            "tgt_tokens": state.tgt_tokens,
            "tokens_per_sec": state.tgt_tokens / state.train_seconds,
            "tokens_per_step": state.tgt_tokens / max(state.step, 1),
            "skipped_steps": state.skipped_steps,
            "num_parameters": self.model.num_parameters(),
            "best_val_bleu": state.best_val_bleu,
            "best_step": state.best_step,
            "val_history": state.val_history,
            "test": tests,
            "long_inputs": long_inputs,
            "config": OmegaConf.to_container(cfg, resolve=True),
        }
        views.log_embedding_projector(self.writer, self.model, self.data.tokenizers, state.step)
        views.log_hparams(self.writer, cfg, metrics)  # last: it flushes the writer first
        save_json(self.run_dir / "metrics.json", metrics)
        return metrics


def _trainer_keys(cfg: DictConfig) -> tuple[str, ...]:
    return tuple(f"trainer.{key}" for key in cfg.trainer)
