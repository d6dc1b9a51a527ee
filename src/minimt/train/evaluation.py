"""Scoring during and after training: validation loss and BLEU, test sets with beam search."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from minimt.atomic import write_text
from minimt.data.corpus import Pairs
from minimt.data.tokenized import BatchedPairs
from minimt.metrics import CorpusScores, corpus_scores
from minimt.model.transformer import Transformer
from minimt.train.step import SummedLoss
from minimt.translator import Translator

log = logging.getLogger(__name__)


@torch.no_grad()
def validation_nll(model: Transformer, batches: BatchedPairs, autocast: torch.autocast) -> float:
    """Mean negative log-likelihood per target token (no label smoothing): exp() is perplexity."""
    model.eval()
    nll = SummedLoss(model, 0.0, autocast)
    device = next(model.parameters()).device
    total, count = torch.zeros((), device=device), 0
    for batch in batches.iterate():
        batch = batch.to(device)
        total += nll(batch.src, batch.tgt_in, batch.tgt_out, batch.real)
        count += batch.num_tgt_tokens
    return total.item() / count


def score(
    translator: Translator, pairs: Pairs, beam: int, length_penalty: float
) -> tuple[CorpusScores, list[str]]:
    """Translate the source side of `pairs` and score it against the raw references."""
    hyps = translator.translate(pairs[0], beam=beam, length_penalty=length_penalty)
    return corpus_scores(hyps, pairs[1]), hyps


def validate(
    translator: Translator, val_pairs: Pairs, val_batches: BatchedPairs, autocast: torch.autocast
) -> tuple[float, CorpusScores, list[str]]:
    """Validation NLL per target token, corpus scores of cached greedy decoding, and its
    hypotheses (one per pair of val_pairs)."""
    nll = validation_nll(translator.model, val_batches, autocast)
    scores, hyps = score(translator, val_pairs, beam=1, length_penalty=1.0)
    return nll, scores, hyps


def score_test_sets(
    translator: Translator,
    tests: dict[str, Pairs],
    beam: int,
    length_penalty: float,
    out: Path,
    suffix: str = "",
) -> dict[str, dict]:
    """Scores per test set with beam decoding (hypotheses written to out/hyps.<name><suffix>.txt,
    e.g. suffix ".average")."""
    results = {}
    for name, pairs in tests.items():
        scores, hyps = score(translator, pairs, beam, length_penalty)
        write_text(out / f"hyps.{name}{suffix}.txt", "".join(h + "\n" for h in hyps))
        results[name] = {**scores.as_dict(), "beam": beam, "length_penalty": length_penalty}
        log.info(
            "%s%s (beam %d): BLEU %.2f chrF %.2f | %s",
            name,
            suffix,
            beam,
            scores.bleu,
            scores.chrf,
            scores.bleu_signature,
        )
    return results
