"""The training run: data and tokenizer set-up, the loop, validation, checkpoints, final test."""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor
from torch.utils.tensorboard import SummaryWriter
from tqdm import tqdm

from minimt.checkpoint import (
    load_checkpoint,
    remove_old_checkpoints,
    save_checkpoint,
    save_json,
)
from minimt.config import validate_config
from minimt.data import Batch, BatchedPairs
from minimt.loss import label_smoothed_cross_entropy
from minimt.metrics import CorpusScores, corpus_scores
from minimt.model import Transformer
from minimt.rundata import Pairs, RunData, prepare_data
from minimt.rundir import build_model, pick_device, resolve_precision
from minimt.tokenizer import PAD_ID
from minimt.translator import Translator

log = logging.getLogger(__name__)


@dataclass
class TrainState:
    """Everything about the run's progress that is not a tensor."""

    step: int = 0
    epoch: int = 0
    tgt_tokens: int = 0
    train_seconds: float = 0.0
    best_val_bleu: float = -1.0
    best_step: int = 0
    val_history: list[dict[str, float]] = field(default_factory=list)


def inverse_sqrt_lr(step: int, warmup_steps: int) -> float:
    """LR factor for update number step+1: linear warmup to 1, then sqrt(warmup / updates)."""
    updates = step + 1
    return min(updates / warmup_steps, math.sqrt(warmup_steps / updates))


def target_loss(model: Transformer, batch: Batch, autocast: torch.autocast, eps: float) -> Tensor:
    """Label-smoothed cross-entropy per real target token; logits only for non-pad positions."""
    real = batch.tgt_out != PAD_ID  # (B, T)
    with autocast:
        hidden = model.decode(batch.tgt_in, model.encode(batch.src), batch.src)  # (B, T, d_model)
        logits = model.project(hidden[real])  # (N, V)
    return label_smoothed_cross_entropy(logits, batch.tgt_out[real], eps) / real.sum()


def train_step(
    model: Transformer,
    batch: Batch,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    autocast: torch.autocast,
    trainer: DictConfig,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One update; returns (label-smoothed loss per target token, grad norm) as tensors."""
    model.train()
    loss = target_loss(model, batch, autocast, trainer.label_smoothing)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    max_norm = trainer.clip_grad_norm or math.inf
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scheduler.step()
    return loss.detach(), grad_norm


@torch.no_grad()
def validation_nll(model: Transformer, batches: BatchedPairs, autocast: torch.autocast) -> float:
    """Mean negative log-likelihood per target token (no label smoothing): exp() is perplexity."""
    model.eval()
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    for batch in batches.iterate():
        n_tokens = batch.num_tgt_tokens
        total += target_loss(model, batch.to(device), autocast, eps=0.0) * n_tokens
        count += n_tokens
    return total.item() / count


def score(
    translator: Translator, pairs: Pairs, beam: int, length_penalty: float
) -> tuple[CorpusScores, list[str]]:
    """Translate the source side of `pairs` and score it against the raw references."""
    hyps = translator.translate(pairs[0], beam=beam, length_penalty=length_penalty)
    return corpus_scores(hyps, pairs[1]), hyps


def checkpoint_dict(model, optimizer, scheduler, state: TrainState, cfg: DictConfig) -> dict:
    """Everything needed to continue training (last.pt)."""
    return {
        **weights_dict(model, state, cfg),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
    }


def weights_dict(model: Transformer, state: TrainState, cfg: DictConfig) -> dict:
    """Everything needed to rebuild and use the model (best.pt)."""
    return {
        "model": model.state_dict(),
        "state": asdict(state),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }


def log_scalars(writer: SummaryWriter, prefix: str, values: dict[str, float], step: int) -> None:
    for name, value in values.items():
        writer.add_scalar(f"{prefix}/{name}", value, step)


def make_optimizer(
    model: Transformer, trainer: DictConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """Adam with linear warmup then inverse-sqrt decay."""
    optimizer = torch.optim.Adam(
        model.parameters(),
        lr=trainer.lr,
        betas=tuple(trainer.betas),
        weight_decay=trainer.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: inverse_sqrt_lr(step, trainer.warmup_steps)
    )
    return optimizer, scheduler


@dataclass
class Window:
    """Loss and throughput over the steps since the last log line; syncs only when read."""

    loss_sum: Tensor = field(default_factory=lambda: torch.zeros(()))
    tokens: int = 0
    start: float = field(default_factory=time.monotonic)

    def add(self, loss: Tensor, n_tokens: int) -> None:
        self.loss_sum += loss.cpu() * n_tokens
        self.tokens += n_tokens

    def mean_loss(self) -> float:
        return self.loss_sum.item() / self.tokens

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


def train(cfg: DictConfig, run_dir: str | Path) -> dict:
    """Train the configured model in `run_dir`, score the best checkpoint on the test sets.

    Returns the metrics also written to run_dir/metrics.json.
    """
    validate_config(cfg)
    run_dir, trainer = Path(run_dir), cfg.trainer
    random.seed(trainer.seed)
    torch.manual_seed(trainer.seed)
    if trainer.num_threads:
        torch.set_num_threads(trainer.num_threads)
    device = pick_device(trainer.device)
    precision = resolve_precision(trainer.precision, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")

    data = prepare_data(cfg, run_dir)
    model = build_model(cfg, data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size)
    model.to(device)
    log.info(
        "model: %s parameters, device %s, precision %s",
        f"{model.num_parameters():,}",
        device,
        precision,
    )
    optimizer, scheduler = make_optimizer(model, trainer)
    translator = Translator.from_config(model, data.tokenizers, cfg, precision)
    state, ckpt_dir = TrainState(), run_dir / "checkpoints"

    def validate_and_save() -> None:
        nll, scores = validate(translator, data, autocast)
        state.val_history.append({"step": state.step, "loss": nll, "bleu": scores.bleu})
        log_scalars(
            writer,
            "val",
            {"loss": nll, "ppl": math.exp(min(nll, 50)), "bleu": scores.bleu, "chrf": scores.chrf},
            state.step,
        )
        log.info(
            "step %d | val loss %.3f | val BLEU %.2f | chrF %.2f",
            state.step,
            nll,
            scores.bleu,
            scores.chrf,
        )
        if scores.bleu > state.best_val_bleu:
            state.best_val_bleu, state.best_step = scores.bleu, state.step
            save_checkpoint(ckpt_dir / "best.pt", weights_dict(model, state, cfg))
        save_checkpoint(
            ckpt_dir / "last.pt", checkpoint_dict(model, optimizer, scheduler, state, cfg)
        )

    def log_window(window: Window, grad_norm: Tensor) -> None:
        mean_loss, lr = window.mean_loss(), scheduler.get_last_lr()[0]
        if not math.isfinite(mean_loss):
            raise FloatingPointError(
                f"training loss is {mean_loss} at step {state.step}: lower trainer.lr or use "
                f"trainer.precision=fp32; the best checkpoint so far is in {ckpt_dir}"
            )
        values = {
            "loss": mean_loss,
            "lr": lr,
            "grad_norm": grad_norm.item(),
            "tokens_per_sec": window.tokens_per_sec(),
        }
        log_scalars(writer, "train", values, state.step)
        progress.set_postfix(
            loss=f"{mean_loss:.3f}", lr=f"{lr:.2e}", tok_s=f"{values['tokens_per_sec']:,.0f}"
        )
        log.info(
            "step %d | epoch %d | loss %.3f | lr %.2e | grad norm %.2f | %.0f tgt tok/s",
            state.step,
            state.epoch + 1,
            *values.values(),
        )

    start = time.monotonic()
    deadline = start + trainer.max_minutes * 60
    done = False
    with (
        SummaryWriter(run_dir) as writer,
        tqdm(total=trainer.max_steps, disable=None, dynamic_ncols=True, desc="train") as progress,
    ):
        window = Window()
        while not done and state.epoch < trainer.max_epochs:
            for batch in data.train_batches.iterate(state.epoch):
                n_tokens = batch.num_tgt_tokens
                loss, grad_norm = train_step(
                    model, batch.to(device), optimizer, scheduler, autocast, trainer
                )
                state.step += 1
                state.tgt_tokens += n_tokens
                window.add(loss, n_tokens)
                progress.update()
                done = state.step >= trainer.max_steps or time.monotonic() >= deadline
                if state.step % trainer.log_every == 0 or done:
                    log_window(window, grad_norm)
                    window = Window()
                if state.step % trainer.save_every == 0:
                    save_checkpoint(
                        ckpt_dir / f"step_{state.step}.pt", weights_dict(model, state, cfg)
                    )
                    remove_old_checkpoints(ckpt_dir, trainer.keep_checkpoints)
                if state.step % trainer.val_every == 0 or done:
                    validate_and_save()
                if done:
                    break
            else:
                state.epoch += 1
        if not done and state.step % trainer.val_every:  # max_epochs ended between validations
            validate_and_save()
        state.train_seconds = time.monotonic() - start
        save_checkpoint(
            ckpt_dir / "last.pt", checkpoint_dict(model, optimizer, scheduler, state, cfg)
        )

        log.info("scoring the best checkpoint (step %d) on the test sets", state.best_step)
        model.load_state_dict(load_checkpoint(ckpt_dir / "best.pt")["model"])
        tests = score_test_sets(translator, data, cfg, run_dir)
        for result in tests.values():
            result["checkpoint"] = "best"
        for i, (name, result) in enumerate(tests.items()):  # the first test set is the headline
            prefix = "test" if i == 0 else f"test/{name}"
            log_scalars(
                writer, prefix, {"bleu": result["bleu"], "chrf": result["chrf"]}, state.step
            )

    metrics = {
        "steps": state.step,
        "epochs_completed": state.epoch,
        "precision": precision,
        "train_seconds": state.train_seconds,
        "tgt_tokens": state.tgt_tokens,
        "tokens_per_sec": state.tgt_tokens / state.train_seconds,
        "num_parameters": model.num_parameters(),
        "best_val_bleu": state.best_val_bleu,
        "best_step": state.best_step,
        "val_history": state.val_history,
        "test": tests,
    }
    save_json(run_dir / "metrics.json", metrics)
    return metrics
