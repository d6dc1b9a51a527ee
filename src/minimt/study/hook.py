"""The embedding study plugged into training: its TensorBoard views and, when
decoding.long_inputs is set, joined-input scores.

scripts/train.py installs it when `views: true` (the default); `views=false` trains a plain model.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from omegaconf import DictConfig

from minimt.data.batching import Batch
from minimt.data.corpus import Pairs
from minimt.study import views
from minimt.study.lengths import join_consecutive
from minimt.train.evaluation import Hook, RunContext, score
from minimt.translator import Translator

log = logging.getLogger(__name__)

ATTENTION_SENTENCES = 4  # fixed validation sentences whose cross-attention each validation draws


class StudyViews:
    """At each validation: positional table and similarity, token vs positional norms,
    cross-attention of the first validation sentences. At the end: the Projector table, HPARAMS,
    and when `long_inputs` is not empty greedy scores with k test sentences joined per input
    (metrics.json "long_inputs")."""

    def __init__(self, long_inputs: Sequence[int]):
        self.long_inputs = list(long_inputs)

    def on_validation(self, run: RunContext, step: int) -> None:
        batch = attention_batch(run)
        views.log_positional_views(run.writer, run.model, step)
        views.log_embedding_norms(run.writer, run.model, batch.src.to(run.device), step)
        views.log_cross_attention(
            run.writer, run.model, batch.src, batch.tgt_in, step, run.data.tokenizers
        )

    def on_finish(self, run: RunContext, metrics: dict) -> None:
        if self.long_inputs:
            tests = run.data.splits.tests
            metrics["long_inputs"] = score_long_inputs(run.translator, tests, self.long_inputs)
        views.log_embedding_projector(run.writer, run.model, run.data.tokenizers, metrics["steps"])
        views.log_hparams(run.writer, run.cfg, metrics)  # last: it flushes the writer first


def attention_batch(run: RunContext) -> Batch:
    """The first ATTENTION_SENTENCES validation pairs as one padded batch."""
    n_val = len(run.data.val_batches.pairs)
    return run.data.val_batches.collate(range(min(ATTENTION_SENTENCES, n_val)))


def score_long_inputs(
    translator: Translator, tests: dict[str, Pairs], joins: Sequence[int]
) -> dict[str, dict]:
    """Greedy scores on each test set with k consecutive sentences joined into one input."""
    results: dict[str, dict] = {}
    for name, pairs in tests.items():
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


def study_hooks(cfg: DictConfig) -> list[Hook]:
    """The hooks scripts/train.py installs: the study's views unless `views: false`."""
    return [StudyViews(cfg.decoding.long_inputs)] if cfg.views else []
