"""Verdicts a protocol can reach: within one question's family of seed-paired comparisons,
Holm's correction for differences and for equivalence (two one-sided tests against a margin in
BLEU), and for every comparison the smallest difference its seeds could detect and how many
seeds a verdict would need (exact power of the paired t-test, from the noncentral t), so that
"inconclusive" says why."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import optimize, stats

from minimt.study.significance import PairedDifference, holm

MAX_SEEDS = 200  # seeds needed beyond this are reported as "more than MAX_SEEDS"


@dataclass(frozen=True)
class Rules:
    """The verdict protocol's settings; docs/study.md cites the margin's source."""

    alpha: float = 0.05  # error rate of one question's family, held for each claim type separately
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
    reason: str  # why inconclusive; for equivalent, NONZERO when also shown non-zero; else ""


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


def power_of_difference(difference: float, sd: float, seeds: int, alpha: float) -> float:
    """Exact power of the two-sided paired t-test at `alpha` from `seeds` pairs of spread `sd`
    when the true mean difference is `difference`: P(|T| > t_{1-alpha/2, n-1}) with T
    noncentral t (n - 1 degrees of freedom, noncentrality difference sqrt(n) / sd)."""
    dof, noncentrality = seeds - 1, abs(difference) * math.sqrt(seeds) / sd
    critical = float(stats.t.ppf(1 - alpha / 2, dof))
    upper = float(stats.nct.sf(critical, dof, noncentrality))
    lower = float(stats.nct.cdf(-critical, dof, noncentrality))
    # Far in the tails scipy's noncentral t can return nan: there the rejection on the side of
    # the difference is certain and the one on the other side is negligible.
    if not math.isfinite(upper):
        upper = 1.0 if noncentrality > critical else 0.0
    if not math.isfinite(lower):
        lower = 0.0
    return min(1.0, upper + lower)


def detectable_difference(sd: float, seeds: int, alpha: float, power: float) -> float:
    """The smallest true mean difference a two-sided paired t-test at `alpha` detects with
    `power` from `seeds` pairs of spread `sd` (power_of_difference solved for the difference)."""

    def short(effect: float) -> float:  # in units of sd
        return power_of_difference(effect, 1.0, seeds, alpha) - power

    high = 1.0
    while short(high) < 0:
        high *= 2
    return float(optimize.brentq(short, 0.0, high, xtol=1e-12)) * sd


def equivalence_reach(sd: float, seeds: int, alpha: float, power: float) -> float:
    """How far inside the margin a true difference must lie for two one-sided tests at `alpha`
    to show equivalence with `power`: (t_{1-alpha, n-1} + t_{power, n-1}) sd / sqrt(n)."""
    dof = seeds - 1
    quantiles = stats.t.ppf(1 - alpha, dof) + stats.t.ppf(power, dof)
    return float(quantiles * sd / math.sqrt(seeds))


def seeds_for_difference(sd: float, difference: float, alpha: float, power: float) -> int | None:
    """The fewest seeds whose test at `alpha` has `power` if the true difference is
    `difference` (None above MAX_SEEDS or for no difference)."""
    if difference == 0:
        return None
    return _fewest_seeds(lambda n: power_of_difference(difference, sd, n, alpha) >= power)


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
    Holm-adjusted TOST p < alpha. A difference shown both ways is equivalent, its reason says
    that it is also non-zero (NONZERO): inside the margin it is not one to claim as mattering.
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


NONZERO = "with a small non-zero difference"  # the reason of an equivalence also shown non-zero
NOT_AFTER_HOLM = "unadjusted CI excludes 0; not significant after Holm"


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
    differs, equivalent = holm_p < rules.alpha, holm_tost_p < rules.alpha
    if equivalent:
        name, reason = "equivalent", NONZERO if differs else ""
    elif differs:
        name, reason = "better" if d.mean > 0 else "worse", ""
    else:
        name, reason = "inconclusive", _why(d, for_difference, for_equivalence, rules)
    return Verdict(name, holm_p, holm_tost_p, detectable, for_difference, for_equivalence, reason)


def _why(
    d: PairedDifference, for_difference: int | None, for_equivalence: int | None, rules
) -> str:
    """Why a comparison is inconclusive: too few seeds for the difference measured, or, inside
    the margin, an unadjusted 95% interval that excludes 0 where Holm's adjusted p does not."""
    low, high = d.ci95
    needs = []
    if for_difference is not None:
        needs.append(f"about {for_difference} seeds for better/worse")
    if for_equivalence is not None:
        needs.append(f"{'about ' if not needs else ''}{for_equivalence} for equivalent")
    needed = (
        " or ".join(needs) + f", for {rules.power:.0%} power if the true difference equals the "
        "observed one, at this family's size"
        if needs
        else f"more than {MAX_SEEDS} seeds"
    )
    if (low > 0 or high < 0) and abs(d.mean) < rules.margin:
        return f"{NOT_AFTER_HOLM} (inside ±{rules.margin:g}): {needed}"
    return f"too few seeds: {needed}"
