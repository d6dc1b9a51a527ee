"""Seed-paired t statistics, Holm's correction, and sacreBLEU's paired bootstrap resampling for
one pair of runs (the verdicts built on them: verdicts.py)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest
from scipy import stats


@dataclass(frozen=True)
class PairedDifference:
    """System minus baseline over seeds paired by trainer.seed; intervals are (low, high)."""

    seeds: int  # paired seeds n; with fewer than 2 there is no interval and no p-value
    mean: float  # mean of the n differences
    sd: float | None  # their sample standard deviation (n - 1); None below 2 seeds
    ci95: tuple[float, float] | None  # Student t interval, n - 1 degrees of freedom
    ci90: tuple[float, float] | None  # the interval of the two one-sided tests (TOST)
    p_value: float | None  # two-sided paired t-test of mean difference = 0


def t_interval(differences: Sequence[float], level: float) -> tuple[float, float]:
    """The `level` confidence interval of the mean: mean +- t_{(1+level)/2, n-1} * sd / sqrt(n)."""
    n = len(differences)
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * statistics.stdev(differences) / math.sqrt(n)
    mean = statistics.fmean(differences)
    return mean - half, mean + half


def paired_t_p_value(differences: Sequence[float]) -> float:
    """Two-sided p of the paired t-test; differences without spread give 0 (all equal, nonzero)
    or 1 (all zero), the limits of t = mean / (sd / sqrt(n))."""
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0:
        return 1.0 if mean == 0 else 0.0
    t = mean / (sd / math.sqrt(len(differences)))
    return float(2 * stats.t.sf(abs(t), len(differences) - 1))


def paired_difference(baseline: Sequence[float], system: Sequence[float]) -> PairedDifference:
    """The seed-paired difference of two score lists aligned by seed (baseline[i] and system[i]
    come from the same trainer.seed)."""
    if len(baseline) != len(system) or not baseline:
        raise ValueError(
            f"{len(baseline)} baseline and {len(system)} system scores: give one pair per seed"
        )
    differences = [s - b for b, s in zip(baseline, system, strict=True)]
    if len(differences) < 2:
        return PairedDifference(len(differences), differences[0], None, None, None, None)
    return PairedDifference(
        seeds=len(differences),
        mean=statistics.fmean(differences),
        sd=statistics.stdev(differences),
        ci95=t_interval(differences, 0.95),
        ci90=t_interval(differences, 0.90),
        p_value=paired_t_p_value(differences),
    )


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order: the i-th smallest p times
    (m - i + 1), made non-decreasing in that order, capped at 1."""
    m = len(p_values)
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


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
