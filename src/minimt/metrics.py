"""Corpus-level sacreBLEU scores on detokenized, cased text, with their signatures."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from sacrebleu.metrics import BLEU, CHRF

# A hypothesis with fewer than this share of its reference's words counts as stopping early.
EARLY_STOP_RATIO = Fraction(4, 5)  # exact: 4 of 5 words is not early


@dataclass(frozen=True)
class CorpusScores:
    bleu: float
    chrf: float
    length_ratio: float  # sacreBLEU's sys_len / ref_len (the ratio in its brevity penalty)
    early_stop_share: float  # share of hypotheses with < EARLY_STOP_RATIO x their reference's words
    bleu_signature: str
    chrf_signature: str

    def as_dict(self) -> dict[str, float | str]:
        return {
            "bleu": self.bleu,
            "chrf": self.chrf,
            "length_ratio": self.length_ratio,
            "early_stop_share": self.early_stop_share,
            "signature": self.bleu_signature,
            "chrf_signature": self.chrf_signature,
        }


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> CorpusScores:
    """BLEU and chrF with the sacreBLEU signatures that make them comparable across papers, and
    how long the hypotheses are: overall (length ratio) and one by one (early stops)."""
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must align")
    if not hyps:
        raise ValueError("no sentences to score: a corpus score needs at least one")
    bleu, chrf = BLEU(), CHRF()
    bleu_score = bleu.corpus_score(list(hyps), [list(refs)])
    return CorpusScores(
        bleu=bleu_score.score,
        chrf=chrf.corpus_score(list(hyps), [list(refs)]).score,
        length_ratio=bleu_score.ratio,
        early_stop_share=early_stop_share(hyps, refs),
        bleu_signature=str(bleu.get_signature()),
        chrf_signature=str(chrf.get_signature()),
    )


def early_stop_share(hyps: Sequence[str], refs: Sequence[str]) -> float:
    """The share of hypotheses whose whitespace word count is below EARLY_STOP_RATIO x their
    reference's (0 for no hypotheses)."""
    early = sum(
        len(hyp.split()) < EARLY_STOP_RATIO * len(ref.split())
        for hyp, ref in zip(hyps, refs, strict=True)
    )
    return early / len(hyps) if hyps else 0.0
