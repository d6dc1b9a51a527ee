"""Paired significance of a BLEU difference: sacreBLEU's paired bootstrap resampling."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest


@dataclass(frozen=True)
class PairedResult:
    baseline_bleu: float
    system_bleu: float
    p_value: float
    signature: str  # the BLEU signature with the test's settings (bs:N, seed)


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], refs: Sequence[str], resamples: int = 1000
) -> PairedResult:
    """p-value of the BLEU difference between two systems' hypotheses of the same references.

    This is `sacrebleu --paired-bs` (Koehn 2004, as in Moses): `resamples` resamples of the
    sentences, drawn with sacreBLEU's fixed seed (SACREBLEU_SEED, 12345 unless set).
    """
    if not len(baseline) == len(system) == len(refs):
        raise ValueError(
            f"{len(baseline)} baseline and {len(system)} system hypotheses for {len(refs)} "
            "references: they must align"
        )
    test = PairedTest(
        [("baseline", list(baseline)), ("system", list(system))],
        {"BLEU": BLEU()},
        [list(refs)],
        test_type="bs",
        n_samples=resamples,
    )
    signatures, scores = test()
    base, result = scores["BLEU"]
    # Identical hypotheses make every resampled difference exactly 0, which sacreBLEU's strict
    # "greater than the observed difference" never counts (p = 1/(resamples+1)); no resample can
    # differ by less than nothing, so the p-value is 1.
    p_value = 1.0 if list(baseline) == list(system) else result.p_value
    return PairedResult(base.score, result.score, p_value, signatures["BLEU"].format())
