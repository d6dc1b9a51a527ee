"""Corpus-level sacreBLEU scores on detokenized, cased text, with their signatures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF


@dataclass(frozen=True)
class CorpusScores:
    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str

    def as_dict(self) -> dict[str, float | str]:
        return {
            "bleu": self.bleu,
            "chrf": self.chrf,
            "signature": self.bleu_signature,
            "chrf_signature": self.chrf_signature,
        }


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> CorpusScores:
    """BLEU and chrF with the sacreBLEU signatures that make them comparable across papers."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must align")
    bleu, chrf = BLEU(), CHRF()
    return CorpusScores(
        bleu=bleu.corpus_score(list(hyps), [list(refs)]).score,
        chrf=chrf.corpus_score(list(hyps), [list(refs)]).score,
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
    )
