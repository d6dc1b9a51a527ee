"""Verdicts a protocol can reach: within one question's family of seed-paired comparisons,
Holm's correction for differences and for equivalence (two one-sided tests against a margin in
BLEU), and for every comparison the smallest difference its seeds could detect and how many
seeds a verdict would need, so that "inconclusive" says why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from minimt.study.significance import PairedDifference, holm

MAX_SEEDS = 200  # seeds needed beyond this are reported as "more than MAX_SEEDS"


@dataclass(frozen=True)
class Rules:
    """The verdict protocol's settings; docs/study.md cites the margin's source."""

    alpha: float = 0.05  # family-wise error rate of one question, differences and equivalence alike
    margin: float = 1.0  # BLEU: differences inside +-margin are called equivalent when shown to be
    power: float = 0.8  # the power at which detectable differences and seeds needed are computed


@dataclass(frozen=True)
class Verdict:
    verdict: str  # better | worse | equivalent | inconclusive
    holm_p: float | None  # difference = 0, Holm-adjusted within the family
    holm_tost_p: float | None  # |difference| >= margin, Holm-adjusted within the family
    detectable: float | None  # smallest |difference| these seeds detect (power, alpha / family)
    seeds_for_difference: int | None  # seeds to detect the observed difference; None: never
    seeds_for_equivalence: int | None  # seeds to show equivalence at the observed difference
    reason: str  # why inconclusive ("" otherwise)


def tost_p_value(difference: PairedDifference, margin: float) -> float:
    """p of the two one-sided t-tests of H0: |mean difference| >= margin (the larger of the two
    one-sided p-values); differences without spread give 0 inside the margin, 1 outside."""
    n, mean, sd = difference.seeds, difference.mean, difference.sd
    if sd == 0:
        return 0.0 if abs(mean) < margin else 1.0
    se = sd / math.sqrt(n)
    above_lower = float(stats.t.sf((mean + margin) / se, n - 1))
    below_upper = float(stats.t.cdf((mean - margin) / se, n - 1))
    return max(above_lower, below_upper)


def pooled_sd(differences: Sequence[PairedDifference]) -> float | None:
    """The seed spread of paired differences pooled over comparisons: sqrt of the mean of their
    variances weighted by degrees of freedom (n - 1); None without any comparison of 2+ seeds."""
    tested = [d for d in differences if d.seeds > 1]
    dof = sum(d.seeds - 1 for d in tested)
    if not dof:
        return None
    return math.sqrt(sum((d.seeds - 1) * d.sd**2 for d in tested) / dof)


def detectable_difference(sd: float, seeds: int, alpha: float, power: float) -> float:
    """The smallest true mean difference a two-sided paired t-test at `alpha` detects with
    `power` from `seeds` pairs of spread `sd`:
    (t_{1-alpha/2, n-1} + t_{power, n-1}) sd / sqrt(n)."""
    dof = seeds - 1
    quantiles = stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(power, dof)
    return float(quantiles * sd / math.sqrt(seeds))


def equivalence_reach(sd: float, seeds: int, alpha: float, power: float) -> float:
    """How far inside the margin a true difference must lie for two one-sided tests at `alpha`
    to show equivalence with `power`: (t_{1-alpha, n-1} + t_{power, n-1}) sd / sqrt(n)."""
    dof = seeds - 1
    quantiles = stats.t.ppf(1 - alpha, dof) + stats.t.ppf(power, dof)
    return float(quantiles * sd / math.sqrt(seeds))


def seeds_for_difference(sd: float, difference: float, alpha: float, power: float) -> int | None:
    """The fewest seeds whose detectable difference is at most |difference| (None above
    MAX_SEEDS or for no difference)."""
    return _fewest_seeds(lambda n: detectable_difference(sd, n, alpha, power) <= abs(difference))


def seeds_for_equivalence(
    sd: float, difference: float, margin: float, alpha: float, power: float
) -> int | None:
    """The fewest seeds that show equivalence when the true difference is `difference` (None
    when it lies on or outside the margin, or above MAX_SEEDS)."""
    room = margin - abs(difference)
    if room <= 0:
        return None
    return _fewest_seeds(lambda n: equivalence_reach(sd, n, alpha, power) <= room)


def _fewest_seeds(enough) -> int | None:
    return next((n for n in range(2, MAX_SEEDS + 1) if enough(n)), None)


def family_verdicts(differences: Sequence[PairedDifference], rules: Rules) -> list[Verdict]:
    """The verdict of every comparison of one question (one family), in the input order.

    better / worse: Holm-adjusted p < alpha (and so the 95% interval excludes 0); equivalent:
    Holm-adjusted TOST p < alpha; a difference shown both ways is called better or worse.
    Detectable differences and seeds needed use the family's pooled seed spread at
    alpha / (family size), Holm's first threshold.
    """
    tested = [i for i, d in enumerate(differences) if d.p_value is not None]
    holm_p = dict(zip(tested, holm([differences[i].p_value for i in tested]), strict=True))
    tost = [tost_p_value(differences[i], rules.margin) for i in tested]
    holm_tost = dict(zip(tested, holm(tost), strict=True))
    sd = pooled_sd(differences)
    level = rules.alpha / max(len(tested), 1)
    return [
        _verdict(d, holm_p.get(i), holm_tost.get(i), sd, level, rules)
        for i, d in enumerate(differences)
    ]


def _verdict(
    d: PairedDifference,
    holm_p: float | None,
    holm_tost_p: float | None,
    sd: float | None,
    level: float,
    rules: Rules,
) -> Verdict:
    if holm_p is None or sd is None:
        return Verdict("inconclusive", None, None, None, None, None, "one seed: no interval")
    if sd == 0:
        detectable, for_difference, for_equivalence = 0.0, 2, 2
    else:
        detectable = detectable_difference(sd, d.seeds, level, rules.power)
        for_difference = seeds_for_difference(sd, d.mean, level, rules.power)
        for_equivalence = seeds_for_equivalence(sd, d.mean, rules.margin, level, rules.power)
    if holm_p < rules.alpha:
        name = "better" if d.mean > 0 else "worse"
    elif holm_tost_p < rules.alpha:
        name = "equivalent"
    else:
        name = "inconclusive"
    reason = "" if name != "inconclusive" else _why(d, for_difference, for_equivalence, rules)
    return Verdict(name, holm_p, holm_tost_p, detectable, for_difference, for_equivalence, reason)


def _why(
    d: PairedDifference, for_difference: int | None, for_equivalence: int | None, rules
) -> str:
    """Why a comparison is inconclusive: too few seeds for the difference measured, or a real
    but small effect (its 95% interval excludes 0, yet it lies inside the margin)."""
    low, high = d.ci95
    needs = []
    if for_difference is not None:
        needs.append(f"{for_difference} seeds for better/worse")
    if for_equivalence is not None:
        needs.append(f"{for_equivalence} for equivalent")
    needed = " or ".join(needs) or f"more than {MAX_SEEDS} seeds"
    if (low > 0 or high < 0) and abs(d.mean) < rules.margin:
        return f"a real but small effect (inside ±{rules.margin:g}): {needed}"
    return f"too few seeds: {needed}"
