"""Seed-paired statistics and the verdicts built on them: Student t intervals and tests, Holm's
correction, equivalence (two one-sided tests against a margin), the exact power of the paired
t-test (noncentral t) and of the paired TOST (integrated over the sample sd's distribution)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import integrate, optimize, special, stats

MAX_SEEDS = 200  # seeds needed beyond this are reported as "more than MAX_SEEDS"
NONZERO = "with a small non-zero difference"  # the reason of an equivalence also shown non-zero
NOT_AFTER_HOLM = "unadjusted CI excludes 0; not significant after Holm"
NO_SPREAD = "no spread: no test"  # every seed gave the same difference: a t-test has nothing
MIN_SEEDS = 3  # a verdict word needs this many seeds: an sd from 1 degree of freedom is no evidence


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); None where there are too few values."""
    return mean(values), statistics.stdev(values) if len(values) > 1 else None


@dataclass(frozen=True)
class PairedDifference:
    """System minus baseline over seeds paired by trainer.seed; intervals are (low, high)."""

    seeds: int  # with fewer than 2 there is no interval and no p-value
    mean: float
    sd: float | None  # sample standard deviation (n - 1)
    ci95: tuple[float, float] | None  # Student t, n - 1 degrees of freedom
    p_value: float | None  # two-sided paired t-test of mean difference = 0


def paired_difference(baseline: Sequence[float], system: Sequence[float]) -> PairedDifference:
    """The difference, system minus baseline, of two score lists aligned by seed."""
    if len(baseline) != len(system) or not baseline:
        raise ValueError(
            f"{len(baseline)} baseline and {len(system)} system scores: give one pair per seed"
        )
    differences = [s - b for b, s in zip(baseline, system, strict=True)]
    n = len(differences)
    if n < 2:
        return PairedDifference(1, differences[0], None, None, None)
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0:  # t = mean / (sd / sqrt(n)) is 0 (all zero) or infinite
        p_value = 1.0 if mean == 0 else 0.0
    else:
        p_value = float(2 * stats.t.sf(abs(mean / (sd / math.sqrt(n))), n - 1))
    half = float(stats.t.ppf(0.975, n - 1)) * sd / math.sqrt(n)  # Student t, 95%
    return PairedDifference(n, mean, sd, (mean - half, mean + half), p_value)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class Rules:
    """The verdict protocol's settings; docs/study.md cites the margin's source."""

    alpha: float = 0.05  # error rate of one question's family, for each claim type separately
    margin: float = 1.0  # BLEU: differences inside +-margin are called equivalent when shown to be
    power: float = 0.8  # of the detectable differences and the seeds needed


@dataclass(frozen=True)
class Verdict:
    verdict: str  # better | worse | equivalent | non-inferior | inconclusive
    holm_p: float | None  # difference = 0 (non-inferiority: <= -margin), Holm-adjusted
    holm_tost_p: float | None  # |difference| >= margin, Holm-adjusted within the family
    detectable: float | None  # smallest |difference| these seeds detect (power, alpha / family)
    seeds_for_difference: int | None  # to detect the observed difference; None: never
    seeds_for_equivalence: int | None  # to show equivalence at the observed difference
    reason: str  # why inconclusive; for equivalent, NONZERO when also shown non-zero; else ""


def tost_p_value(difference: PairedDifference, margin: float) -> float:
    """p of the two one-sided t-tests of |mean difference| >= margin (without spread: 0 or 1)."""
    n, mean, sd = difference.seeds, difference.mean, difference.sd
    if sd == 0:
        return 0.0 if abs(mean) < margin else 1.0
    se = sd / math.sqrt(n)
    above_lower = float(stats.t.sf((mean + margin) / se, n - 1))
    return max(above_lower, float(stats.t.cdf((mean - margin) / se, n - 1)))


def non_inferiority_p_value(difference: PairedDifference, margin: float) -> float:
    """p of the one-sided paired t-test of mean difference <= -margin (without spread: 0 or 1)."""
    n, mean, sd = difference.seeds, difference.mean, difference.sd
    if sd == 0:
        return 0.0 if mean > -margin else 1.0
    return float(stats.t.sf((mean + margin) / (sd / math.sqrt(n)), n - 1))


def non_inferiority_verdicts(
    differences: Sequence[PairedDifference], rules: Rules
) -> list[Verdict]:
    """The verdict of every comparison of a non-inferiority family: non-inferior where the
    one-sided test of "worse by the margin or more" is rejected at Holm p < alpha, with 3 seeds
    or more; else inconclusive."""
    tested = [i for i, d in enumerate(differences) if d.p_value is not None]
    p = [non_inferiority_p_value(differences[i], rules.margin) for i in tested]
    holm_p = dict(zip(tested, holm(p), strict=True))
    verdicts = []
    for i, d in enumerate(differences):
        shown = i in holm_p and holm_p[i] < rules.alpha and d.seeds >= MIN_SEEDS
        reason = "" if shown else f"not shown worse by less than {rules.margin:g}"
        reason = reason if i in holm_p else "one seed: no interval"
        name = "non-inferior" if shown else "inconclusive"
        verdicts.append(Verdict(name, holm_p.get(i), None, None, None, None, reason))
    return verdicts


def pooled_sd(differences: Sequence[PairedDifference]) -> float | None:
    """The comparisons' seed spread pooled by degrees of freedom; None without 2+ seeds."""
    tested = [d for d in differences if d.seeds > 1]
    dof = sum(d.seeds - 1 for d in tested)
    return math.sqrt(sum((d.seeds - 1) * d.sd**2 for d in tested) / dof) if dof else None


def power_of_difference(difference: float, sd: float, seeds: int, alpha: float) -> float:
    """Exact power of the two-sided paired t-test at `alpha` from `seeds` pairs of spread `sd`
    when the true mean difference is `difference`: P(|T| > t_{1-alpha/2, n-1}) with T noncentral
    t (n - 1 degrees of freedom, noncentrality difference sqrt(n) / sd)."""
    dof, noncentrality = seeds - 1, abs(difference) * math.sqrt(seeds) / sd
    critical = float(stats.t.ppf(1 - alpha / 2, dof))
    upper = float(stats.nct.sf(critical, dof, noncentrality))
    lower = float(stats.nct.cdf(-critical, dof, noncentrality))
    if not math.isfinite(upper):  # far in the tail scipy's noncentral t can return nan
        upper = noncentral_t_sf(critical, dof, noncentrality)
    # the lower tail where scipy fails is beyond 1e-12: the side against the difference
    return min(1.0, upper + (lower if math.isfinite(lower) else 0.0))


def noncentral_t_sf(critical: float, dof: int, noncentrality: float) -> float:
    """P(T > critical) for T noncentral t, T = (Z + noncentrality) / sqrt(V / dof), Z standard
    normal and V chi-square(dof): the normal tail integrated over V."""

    def given(v: float) -> float:
        return float(special.ndtr(noncentrality - critical * math.sqrt(v / dof)))

    return float(integrate.quad(lambda v: given(v) * chi2_pdf(v, dof), 0, math.inf)[0])


def power_of_equivalence(
    difference: float, sd: float, seeds: int, alpha: float, margin: float
) -> float:
    """Exact power of the paired TOST (each one-sided test at `alpha`) from `seeds` pairs of
    spread `sd` when the true mean difference is `difference`: for a sample sd s the test passes
    when the mean lies within margin - t_{1-alpha, n-1} s / sqrt(n) of 0, a normal probability;
    integrated over s, (n - 1) s^2 / sd^2 being chi-square with n - 1 degrees of freedom."""
    dof, se = seeds - 1, sd / math.sqrt(seeds)
    critical = float(stats.t.ppf(1 - alpha, dof))

    def given(v: float) -> float:
        room = margin - critical * se * math.sqrt(v / dof)
        return float(
            special.ndtr((room - difference) / se) - special.ndtr((-room - difference) / se)
        )

    widest = dof * (margin / (critical * se)) ** 2  # beyond it the room is gone
    return float(integrate.quad(lambda v: given(v) * chi2_pdf(v, dof), 0, widest)[0])


def chi2_pdf(v: float, dof: int) -> float:
    """scipy.stats.chi2.pdf(v, dof), by scipy's own formula: the power integrals call it
    thousands of times, where a scipy.stats call's argument handling costs more than the sum."""
    log_pdf = special.xlogy(dof / 2.0 - 1, v) - v / 2.0 - special.gammaln(dof / 2.0)
    return float(np.exp(log_pdf - (np.log(2) * dof) / 2.0))


def sd_upper_limit(sd: float, dof: int, confidence: float) -> float:
    """The one-sided `confidence` upper confidence limit of a normal population's sd from a
    sample sd on `dof` degrees of freedom: sd sqrt(dof / chi2_{1 - confidence, dof}), since
    dof s^2 / sigma^2 is chi-square with `dof` degrees of freedom."""
    if dof < 1:
        raise ValueError(f"an sd on {dof} degrees of freedom has no confidence limit")
    return sd * math.sqrt(dof / float(stats.chi2.ppf(1 - confidence, dof)))


def detectable_difference(sd: float, seeds: int, alpha: float, power: float) -> float:
    """The smallest true difference the test at `alpha` detects with `power`."""

    def short(effect: float) -> float:  # in units of sd
        return power_of_difference(effect, 1.0, seeds, alpha) - power

    high = 1.0
    while short(high) < 0:
        high *= 2
    return float(optimize.brentq(short, 0.0, high, xtol=1e-12)) * sd


def seeds_for_difference(sd: float, difference: float, alpha: float, power: float) -> int | None:
    """The fewest seeds with `power` at a true `difference` (None for 0 or above MAX_SEEDS)."""
    if difference == 0:
        return None
    return fewest_seeds(lambda n: power_of_difference(difference, sd, n, alpha) >= power)


def seeds_for_equivalence(
    sd: float, difference: float, margin: float, alpha: float, power: float
) -> int | None:
    """The fewest seeds that show equivalence with `power` at a true `difference`, by the exact
    TOST power (None on or outside the margin, or above MAX_SEEDS)."""
    if abs(difference) >= margin:
        return None
    return fewest_seeds(lambda n: power_of_equivalence(difference, sd, n, alpha, margin) >= power)


def fewest_seeds(enough: Callable[[int], bool]) -> int | None:
    """The fewest n in 2..MAX_SEEDS with enough(n), or None. Power grows with the seeds, so
    enough(n) holds from its first n on: found by doubling, then bisection, which asks the power
    integral about 2 log2(n) times instead of n times, and never beyond twice the answer."""
    low, high = 1, 2  # enough(low) is taken as false
    while not enough(high):
        if high == MAX_SEEDS:
            return None
        low, high = high, min(2 * high, MAX_SEEDS)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def family_verdicts(differences: Sequence[PairedDifference], rules: Rules) -> list[Verdict]:
    """The verdict of every comparison of one family, in the input order: better / worse at Holm
    p < alpha, equivalent at TOST Holm p < alpha (NONZERO when shown both ways); detectable
    differences and seeds needed at the pooled spread and alpha / family size."""
    tested = [i for i, d in enumerate(differences) if d.p_value is not None]
    holm_p = dict(zip(tested, holm([differences[i].p_value for i in tested]), strict=True))
    tost = [tost_p_value(differences[i], rules.margin) for i in tested]
    holm_tost = dict(zip(tested, holm(tost), strict=True))
    sd = pooled_sd(differences)
    level = rules.alpha / max(len(tested), 1)
    return [
        verdict_of(d, holm_p.get(i), holm_tost.get(i), sd, level, rules)
        for i, d in enumerate(differences)
    ]


def verdict_of(
    d: PairedDifference,
    holm_p: float | None,
    holm_tost_p: float | None,
    sd: float | None,
    level: float,
    rules: Rules,
) -> Verdict:
    if holm_p is None or sd is None:
        return Verdict("inconclusive", None, None, None, None, None, "one seed: no interval")
    if d.sd == 0 or sd == 0:
        return Verdict("inconclusive", holm_p, holm_tost_p, None, None, None, NO_SPREAD)
    detectable = detectable_difference(sd, d.seeds, level, rules.power)
    for_difference = seeds_for_difference(sd, d.mean, level, rules.power)
    for_equivalence = seeds_for_equivalence(sd, d.mean, rules.margin, level, rules.power)
    differs, equivalent = holm_p < rules.alpha, holm_tost_p < rules.alpha
    if d.seeds < MIN_SEEDS and (differs or equivalent):
        name, reason = "inconclusive", f"{d.seeds} seeds: a verdict needs {MIN_SEEDS} or more"
    elif equivalent:
        name, reason = "equivalent", NONZERO if differs else ""
    elif differs:
        name, reason = "better" if d.mean > 0 else "worse", ""
    else:
        name, reason = "inconclusive", why_inconclusive(d, for_difference, for_equivalence, rules)
    return Verdict(name, holm_p, holm_tost_p, detectable, for_difference, for_equivalence, reason)


def why_inconclusive(
    d: PairedDifference, for_difference: int | None, for_equivalence: int | None, rules: Rules
) -> str:
    """Too few seeds for the difference measured, or, inside the margin, an unadjusted interval
    that excludes 0 where Holm's p does not; with the seeds a verdict would need."""
    needs = [f"about {for_difference} seeds for better/worse"] if for_difference else []
    if for_equivalence is not None:
        needs.append(f"{'about ' if not needs else ''}{for_equivalence} for equivalent")
    power = f"for {rules.power:.0%} power if the true difference equals the observed one"
    more = f"more than {MAX_SEEDS} seeds"
    needed = f"{' or '.join(needs)}, {power}, at this family's size" if needs else more
    low, high = d.ci95
    if (low > 0 or high < 0) and abs(d.mean) < rules.margin:
        return f"{NOT_AFTER_HOLM} (inside ±{rules.margin:g}): {needed}"
    return f"too few seeds: {needed}"
