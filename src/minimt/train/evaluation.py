"""Scoring during and after training: validation loss and BLEU (best.pt kept), test sets with
beam search, metrics.json, and the hooks that code plugged into a run (the study) sees then."""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import torch
from omegaconf import DictConfig, OmegaConf
from torch.utils.tensorboard import SummaryWriter

from minimt.atomic import write_text
from minimt.checkpoint import (
    average_checkpoints,
    average_last_checkpoints,
    averaged_from,
    load_checkpoint,
    load_weights_from,
    save_checkpoint,
    step_checkpoints,
    step_of,
)
from minimt.data.corpus import Pairs
from minimt.data.length_split import LONG_PREFIX, POOLED_LONG
from minimt.data.splits import RunData
from minimt.data.tokenized import BatchedPairs
from minimt.metrics import CorpusScores, corpus_scores
from minimt.migrations import FINISHED_KEY, FORMAT_KEY, RUN_FORMAT
from minimt.model.transformer import Transformer
from minimt.provenance import provenance, read_starts
from minimt.rundir import update_metrics
from minimt.runtime import device_name
from minimt.train.memory import PeakMemory
from minimt.train.progress import log_samples, log_scalars
from minimt.train.state import Clock, TrainState, weights_dict
from minimt.train.step import SummedLoss, Training
from minimt.translator import Translator

log = logging.getLogger(__name__)


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


@torch.no_grad()
def validation_nll(model: Transformer, batches: BatchedPairs, autocast: torch.autocast) -> float:
    """Mean negative log-likelihood per target token (no label smoothing): exp() is perplexity.
    Over the pairs of `batches`: RunData.val_batches holds those that fit the position table
    (prepare_data counts the others in its summary, metrics.json "data")."""
    model.eval()
    nll = SummedLoss(model, 0.0, autocast)
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    for batch in batches.iterate():
        batch = batch.to(device)
        total += nll(batch.src, batch.tgt_in, batch.tgt_out, batch.nonpad_index)
        count += batch.num_tgt_tokens
    return total.item() / count


def score(
    translator: Translator, pairs: Pairs, beam: int, length_penalty: float
) -> tuple[CorpusScores, list[str]]:
    """Translate the source side of `pairs` and score it against the raw references."""
    hyps = translator.translate(pairs[0], beam=beam, length_penalty=length_penalty)
    return corpus_scores(hyps, pairs[1]), hyps


def validate_and_keep_best(
    run: RunContext, training: Training, state: TrainState, clock: Clock, hooks: Sequence[Hook]
) -> None:
    """Rank 0: val loss, greedy BLEU and sample translations logged, the hooks called, best.pt
    when BLEU improves."""
    seconds = clock.elapsed()  # the validation itself not included
    data = run.data
    nll = validation_nll(run.translator.model, data.val_batches, training.autocast)
    scores, hyps = score(run.translator, data.splits.val, beam=1, length_penalty=1.0)
    state.val_history.append(
        {"step": state.step, "seconds": seconds, "loss": nll, "bleu": scores.bleu}
    )
    values = {"loss": nll, "ppl": math.exp(min(nll, 50)), "bleu": scores.bleu, "chrf": scores.chrf}
    log_scalars(run.writer, "val", values, state.step)
    log_samples(run.writer, data.splits.val, hyps, state.step)
    log.info(
        "step %d | val loss %.3f | val BLEU %.2f | chrF %.2f",
        state.step,
        nll,
        scores.bleu,
        scores.chrf,
    )
    for hook in hooks:
        hook.on_validation(run, state.step)
    if scores.bleu > state.best_val_bleu:
        state.best_val_bleu, state.best_step = scores.bleu, state.step
        best = weights_dict(run.model, state, run.cfg)
        save_checkpoint(run.run_dir / "checkpoints" / "best.pt", best)


def finish(
    run: RunContext,
    state: TrainState,
    clock: Clock,
    hooks: Sequence[Hook],
    world_size: int,
    stop_reason: str,
    memory: PeakMemory,
) -> dict:
    """Rank 0: score the best checkpoint on the test sets (and, with trainer.average_last, the
    average of the last step checkpoints; with trainer.adapt, what recipe_outcome picks), write
    metrics.json, call the hooks."""
    cfg = run.cfg
    state.train_seconds = clock.elapsed()
    trained = provenance(state.sessions, read_starts(run.run_dir))
    ckpt_dir = run.run_dir / "checkpoints"
    extra = {}
    if cfg.trainer.average_last:  # before best.pt, so that the hooks see the best weights
        memory.phase = "checkpoint averaging"
        averaged = average_last_checkpoints(ckpt_dir, cfg.trainer.average_last)
        memory.phase = "test decoding"
        extra["averaged_from"] = load_checkpoint(averaged)["averaged_from"]
        log.info("scoring the average of %s on the test sets", ", ".join(extra["averaged_from"]))
        extra["test_average"] = score_checkpoint(run, averaged, "test_average", state.step)
    reported = "best"
    if cfg.trainer.adapt or state.recipe:  # a decision taken stays, whatever a resume says
        extra["recipe"] = recipe_outcome(run, state, memory)
        reported = extra["recipe"]["reported"]
    if reported == "best":
        log.info("scoring the best checkpoint (step %d) on the test sets", state.best_step)
    else:
        log.info("scoring %s.pt on the test sets", reported)
    tests = score_checkpoint(run, ckpt_dir / f"{reported}.pt", "test", state.step)
    if reported != "best":  # the magnitudes and the hooks see the best weights
        load_weights_from(run.model, ckpt_dir / "best.pt")
    magnitudes = {"init": state.init_magnitudes, "best": input_magnitudes(run.model, cfg)}
    metrics = {
        FORMAT_KEY: RUN_FORMAT,
        FINISHED_KEY: True,
        "steps": state.step,
        "epochs_completed": state.epoch,
        "stop_reason": stop_reason,
        "precision": run.translator.precision,
        "device": device_name(run.device),
        "provenance": trained,
        "world_size": world_size,
        "accumulate": cfg.trainer.accumulate,
        "train_seconds": state.train_seconds,
        "tgt_tokens": state.tgt_tokens,
        "tokens_per_sec": state.tgt_tokens / state.train_seconds,
        "tokens_per_step": state.tgt_tokens / max(state.step, 1),
        "skipped_steps": state.skipped_steps,
        "num_parameters": run.model.num_parameters(),
        "memory": memory.summary(),
        "data": run.data.summary,
        "best_val_bleu": state.best_val_bleu,
        "best_step": state.best_step,
        "val_history": state.val_history,
        "test": tests,
        "input_magnitudes": magnitudes,
        **extra,
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    save_record(run.run_dir, metrics)  # safe whatever a hook does next
    for hook in hooks:
        hook.on_finish(run, metrics)
    save_record(run.run_dir, metrics)
    return metrics


def recipe_outcome(run: RunContext, state: TrainState, memory: PeakMemory) -> dict:
    """trainer.adapt: metrics.json's "recipe", whose "reported" names the checkpoint the test sets
    score (best, or averaged). A run that adapted averages its step checkpoints from the last
    share of its updates its decision named (those kept) and reports the average where its
    greedy val BLEU beats best.pt's, else best.pt; only the one reported is decoded on the test
    sets."""
    ckpt_dir, trainer = run.run_dir / "checkpoints", run.cfg.trainer
    if not state.recipe:
        log.info(
            "recipe kept: training ended at update %d, before the first validation after "
            "warm-up (trainer.warmup_steps=%d) that decides it",
            state.step,
            trainer.warmup_steps,
        )
        return {"adapted": False, "step": None, "reported": "best"}
    if not state.recipe["adapted"]:
        return state.recipe | {"reported": "best"}
    first = averaged_from(state.step, state.recipe["average"])
    paths = [path for path in step_checkpoints(ckpt_dir) if step_of(path) >= first]
    memory.phase = "checkpoint averaging"
    averaged = average_checkpoints(ckpt_dir, paths)
    memory.phase = "test decoding"
    load_weights_from(run.model, averaged)
    scores, _ = score(run.translator, run.data.splits.val, beam=1, length_penalty=1.0)
    reported = "averaged" if scores.bleu > state.best_val_bleu else "best"
    log.info(
        "recipe: the average of %s has val BLEU %.2f, best.pt (step %d) %.2f: %s.pt is reported",
        ", ".join(path.name for path in paths),
        scores.bleu,
        state.best_step,
        state.best_val_bleu,
        reported,
    )
    outcome = {
        "final_updates": state.step,
        "averaged_from": [path.name for path in paths],
        "val_bleu": {"best": state.best_val_bleu, "averaged": scores.bleu},
        "reported": reported,
    }
    return state.recipe | outcome


def save_record(run_dir: Path, metrics: dict) -> None:
    """metrics.json: training's record, with the "eval" entries evaluate.py added before (to a
    run it scored part-way, or to an earlier end of this one)."""
    update_metrics(run_dir, lambda saved: metrics | {k: v for k, v in saved.items() if k == "eval"})


def input_magnitudes(model: Transformer, cfg: DictConfig) -> dict:
    """RMS of token vectors and positional signal at the input, per side, over the positions a
    training pair can use (data.max_train_len + 1)."""
    return model.embedding.input_magnitudes(cfg.data.max_train_len + 1)


def score_checkpoint(run: RunContext, path: Path, key: str, step: int) -> dict[str, dict]:
    """Load the weights at `path` into the model and score every test set with beam search.

    `key` is "test" (hypotheses in hyps.<name>.txt) or "test_average" (hyps.<name>.average.txt);
    TensorBoard gets <key>/bleu and <key>/chrf for the first test set (the headline) and
    <key>/<name>/bleu, <key>/<name>/chrf for the others.
    """
    load_weights_from(run.model, path)
    beam, length_penalty = run.cfg.decoding.test_beam, run.cfg.decoding.length_penalty
    suffix = {"test": "", "test_average": ".average"}[key]
    settings = {"beam": beam, "length_penalty": length_penalty, "checkpoint": path.stem}
    tests: dict[str, dict] = {}
    all_hyps: dict[str, list[str]] = {}
    for i, (name, pairs) in enumerate(run.data.splits.tests.items()):
        scores, hyps = score(run.translator, pairs, beam, length_penalty)
        write_text(run.run_dir / f"hyps.{name}{suffix}.txt", "".join(h + "\n" for h in hyps))
        tests[name] = scores.as_dict() | settings
        log.info(
            "%s%s (beam %d): BLEU %.2f chrF %.2f | %s",
            name,
            suffix,
            beam,
            scores.bleu,
            scores.chrf,
            scores.bleu_signature,
        )
        split = key if i == 0 else f"{key}/{name}"
        log_scalars(run.writer, split, {"bleu": scores.bleu, "chrf": scores.chrf}, step)
        all_hyps[name] = hyps
    long_sets = [name for name in tests if name.startswith(LONG_PREFIX)]
    if long_sets:
        pooled = pool(run.data.splits.tests, all_hyps, long_sets)
        tests[POOLED_LONG] = pooled.as_dict() | settings | {"pooled": long_sets}
        log.info("%s%s (%s): BLEU %.2f", POOLED_LONG, suffix, " + ".join(long_sets), pooled.bleu)
        log_scalars(run.writer, f"{key}/{POOLED_LONG}", {"bleu": pooled.bleu}, step)
    return tests


def pool(tests: dict[str, Pairs], hyps: dict[str, list[str]], names: list[str]) -> CorpusScores:
    """Corpus scores of the test sets `names` taken as one set: their hypotheses and references
    concatenated (sacreBLEU's corpus BLEU of the union, not a mean of the sets' BLEU)."""
    pooled_hyps = [hyp for name in names for hyp in hyps[name]]
    return corpus_scores(pooled_hyps, [ref for name in names for ref in tests[name][1]])
