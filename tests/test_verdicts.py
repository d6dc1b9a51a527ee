"""The verdict protocol on fabricated seed scores: the family correction, the equivalence margin,
the detectable difference and the seeds needed (exact power, checked by simulation), and a
clear difference and a clear equivalence at 5 seeds."""

import math

import numpy as np
import pytest
from scipy import stats

from minimt.study.significance import (
    MAX_SEEDS,
    NO_SPREAD,
    NONZERO,
    Rules,
    chi2_pdf,
    detectable_difference,
    family_verdicts,
    fewest_seeds,
    noncentral_t_sf,
    paired_difference,
    pooled_sd,
    power_of_difference,
    power_of_equivalence,
    seeds_for_difference,
    seeds_for_equivalence,
    tost_p_value,
)

BASELINE = [30.0, 31.0, 29.5, 30.5, 30.2]
RULES = Rules(alpha=0.05, margin=1.0, power=0.8)


def difference(differences: list[float]):
    baseline = BASELINE[: len(differences)]
    return paired_difference(baseline, [b + d for b, d in zip(baseline, differences, strict=True)])


def judged(differences: list[float], family: int = 1, rules: Rules = RULES):
    """The verdict of BASELINE + differences against BASELINE in a family of `family` copies."""
    return family_verdicts([difference(differences)] * family, rules)[0]


def test_clearly_better_and_clearly_worse_at_five_seeds():
    assert judged([3.0, 3.2, 2.9, 3.1, 3.0]).verdict == "better"
    assert judged([-3.0, -3.2, -2.9, -3.1, -3.0]).verdict == "worse"
    assert judged([-3.0, -3.2, -2.9, -3.1, -3.0], family=15).verdict == "worse"


def test_clearly_equivalent_at_five_seeds_even_in_a_family_of_fifteen():
    verdict = judged([0.1, -0.1, 0.05, -0.05, 0.0], family=15)
    assert verdict.verdict == "equivalent" and verdict.reason == ""


def test_too_few_seeds_or_a_wide_interval_is_inconclusive():
    one = judged([10.0])  # one seed, however large
    assert one.verdict == "inconclusive" and one.reason == "one seed: no interval"
    wide = judged([3.0, -2.0, 4.0, -1.0, 2.5])
    assert wide.verdict == "inconclusive" and wide.reason.startswith("too few seeds")


def test_the_family_correction_can_turn_a_difference_inconclusive():
    differences = [1.0, 0.2, 1.8, 0.6, 1.4]  # p = 0.024, mean 1.0 on the margin
    assert judged(differences).verdict == "better"
    tenfold = judged(differences, family=10)
    assert tenfold.verdict == "inconclusive"
    assert tenfold.holm_p == pytest.approx(min(1.0, 10 * difference(differences).p_value))


def test_holm_runs_within_the_family_only():
    strong, weak = difference([1.0, 1.2, 0.9, 1.1, 1.3]), difference([0.5, 0.9, 0.3, 0.7, 0.4])
    alone = family_verdicts([strong, weak], RULES)
    assert [v.holm_p for v in alone] == pytest.approx(
        [2 * strong.p_value, max(2 * strong.p_value, weak.p_value)]
    )
    crowded = family_verdicts([strong, weak] + [difference([0.1, -2.0, 2.0])] * 8, RULES)
    assert crowded[0].holm_p > alone[0].holm_p


def test_the_margin_decides_equivalence():
    small = [0.4, 0.6, 0.5, 0.3, 0.7]  # mean 0.5, 90% interval ~[0.33, 0.67]
    assert judged(small, rules=Rules(0.05, 0.5, 0.8)).verdict != "equivalent"
    d = difference(small)
    se = d.sd / math.sqrt(5)
    expected = max(stats.t.sf((0.5 + 1.0) / se, 4), stats.t.cdf((0.5 - 1.0) / se, 4))
    assert tost_p_value(d, 1.0) == pytest.approx(expected)


def test_a_difference_shown_both_ways_is_equivalent_with_a_small_non_zero_difference():
    small = [0.4, 0.6, 0.5, 0.3, 0.7]  # p 0.002 against 0, and well inside +-1
    verdict = judged(small, rules=Rules(0.05, 1.0, 0.8))
    assert verdict.holm_p < 0.05 and verdict.holm_tost_p < 0.05
    assert verdict.verdict == "equivalent" and verdict.reason == NONZERO
    assert NONZERO == "with a small non-zero difference"


def test_an_unadjusted_interval_that_excludes_0_is_no_verdict():
    small = difference([-0.2, -1.2, -0.7, -0.3, -1.1])  # mean -0.7, p 0.026: interval excludes 0
    verdict = family_verdicts([small] * 3, RULES)[0]  # Holm p 0.077; TOST p 0.11
    assert small.ci95[1] < 0 and verdict.verdict == "inconclusive"
    label = "unadjusted CI excludes 0; not significant after Holm (inside ±1): about "
    assert verdict.reason.startswith(label)
    assert "for 80% power if the true difference equals the observed one" in verdict.reason
    assert "real" not in verdict.reason


def simulated_power(difference: float, sd: float, seeds: int, alpha: float) -> float:
    """The share of 20,000 seeded draws of `seeds` normal paired differences that the two-sided
    paired t-test at `alpha` rejects."""
    draws = np.random.default_rng(0).normal(difference, sd, size=(20_000, seeds))
    t = draws.mean(axis=1) / (draws.std(axis=1, ddof=1) / math.sqrt(seeds))
    return float(np.mean(np.abs(t) > stats.t.ppf(1 - alpha / 2, seeds - 1)))


@pytest.mark.parametrize(("seeds", "alpha"), [(3, 0.05 / 7), (3, 0.05), (5, 0.05 / 2), (8, 0.01)])
def test_the_detectable_difference_has_its_power_in_simulation(seeds, alpha):
    detectable = detectable_difference(0.9, seeds, alpha, 0.8)
    assert power_of_difference(detectable, 0.9, seeds, alpha) == pytest.approx(0.8, abs=1e-8)
    # 20,000 draws: Monte-Carlo sd of a share near 0.8 is 0.003
    assert simulated_power(detectable, 0.9, seeds, alpha) == pytest.approx(0.8, abs=0.012)
    # the t-quantile shortcut it replaces falls short of 80% at few seeds
    dof = seeds - 1
    shortcut = (stats.t.ppf(1 - alpha / 2, dof) + stats.t.ppf(0.8, dof)) * 0.9 / math.sqrt(seeds)
    if seeds == 3 and alpha < 0.01:  # as at Holm's first step in a family of 7
        assert simulated_power(shortcut, 0.9, seeds, alpha) < 0.75 and shortcut < detectable


def test_exact_power_against_closed_forms():
    # no difference: the test's own size
    assert power_of_difference(0.0, 1.0, 3, 0.05) == pytest.approx(0.05)
    # many seeds: the normal closed form (z_{0.975} + z_{0.8}) sd / sqrt(n)
    assert detectable_difference(2.0, 10_000, 0.05, 0.8) == pytest.approx(
        (1.959964 + 0.841621) * 2.0 / 100, rel=1e-3
    )
    # far in the tail scipy's noncentral t gives nan; power is then 1, not nan
    assert math.isnan(stats.nct.cdf(-stats.t.ppf(1 - 0.05 / 14, 2), 2, 40.0))
    assert power_of_difference(40.0 / math.sqrt(3), 1.0, 3, 0.05 / 7) == pytest.approx(1, abs=1e-4)
    assert power_of_difference(1e4, 1.0, 50, 1e-4) == 1.0


@pytest.mark.parametrize(
    ("sd", "family", "expected"),
    [  # the pooled seed spreads of the committed runs' families, and exact detectable at 3 seeds
        (0.8708, 7, 7.55),  # experiment=study_cpu Q2 (the shortcut gave 6.45)
        (0.6130, 2, 2.84),  # experiment=study_cpu Q1 (2.57)
        (0.5386, 4, 3.53),  # experiment=study Q1 (3.08)
        (0.6738, 2, 3.12),  # experiment=study Q3 (2.83)
        (0.4580, 2, 2.12),  # experiment=study Q4 (1.92)
    ],
)
def test_the_detectable_difference_at_three_seeds(sd, family, expected):
    assert detectable_difference(sd, 3, 0.05 / family, 0.8) == pytest.approx(expected, abs=0.01)


@pytest.mark.parametrize("dof", [1, 2, 3, 7, 11, 199])
def test_the_power_integrals_chi_square_density_is_scipys_bit_for_bit(dof):
    points = [1e-300, 1e-9, 0.3, 1.0, float(dof), 2.5 * dof, 40.0 * dof, 1e4]
    assert [chi2_pdf(v, dof) for v in points] == [float(stats.chi2.pdf(v, dof)) for v in points]


def test_seeds_needed_are_the_fewest_with_the_power():
    n = seeds_for_difference(1.0, 1.0, 0.05, 0.8)
    assert n == 10  # the textbook paired t-test size for an effect of 1 sd
    assert (
        power_of_difference(1.0, 1.0, n, 0.05) >= 0.8 > power_of_difference(1.0, 1.0, n - 1, 0.05)
    )
    assert seeds_for_difference(1.0, -1.0, 0.05, 0.8) == n
    assert seeds_for_difference(1.0, 0.0, 0.05, 0.8) is None
    assert seeds_for_difference(1.0, 0.01, 0.05, 0.8) is None  # more than MAX_SEEDS
    m = seeds_for_equivalence(1.0, 0.0, 1.0, 0.05, 0.8)
    assert power_of_equivalence(0.0, 1.0, m, 0.05, 1.0) >= 0.8
    assert power_of_equivalence(0.0, 1.0, m - 1, 0.05, 1.0) < 0.8
    assert seeds_for_equivalence(1.0, 1.2, 1.0, 0.05, 0.8) is None  # outside the margin


@pytest.mark.parametrize("first", [2, 3, 4, 5, 17, 64, 65, 127, 199, 200, 201])
def test_the_fewest_seeds_search_finds_what_counting_up_finds(first):
    asked = []

    def enough(n: int) -> bool:
        asked.append(n)
        return n >= first

    assert fewest_seeds(enough) == (first if first <= MAX_SEEDS else None)
    assert all(n <= 2 * first for n in asked)  # the power is never asked far beyond the answer
    assert len(asked) <= 2 * math.log2(MAX_SEEDS) + 2


def test_seeds_for_equivalence_come_from_the_exact_tost_power_not_the_t_quantile_formula():
    # near 0 the formula (t_{1-a} + t_{power}) sd / sqrt(n) <= margin is optimistic: 8 and 13
    assert seeds_for_equivalence(0.94, 0.0, 1.0, 0.05, 0.8) == 10
    assert seeds_for_equivalence(0.94, 0.0, 1.0, 0.05 / 6, 0.8) == 15
    assert power_of_equivalence(0.0, 0.94, 8, 0.05, 1.0) == pytest.approx(0.71, abs=0.005)
    assert power_of_equivalence(-0.41, 0.94, 12, 0.05, 1.0) == pytest.approx(0.652, abs=0.001)


def test_the_exact_tost_power_matches_a_simulation():
    rng = np.random.default_rng(5)
    draws, n, sd, true, margin = 200_000, 6, 0.9, 0.3, 1.0
    d = rng.normal(true, sd, (draws, n))
    se = d.std(axis=1, ddof=1) / math.sqrt(n)
    critical = stats.t.ppf(0.95, n - 1)
    shown = ((d.mean(axis=1) + margin) / se > critical) & (
        (margin - d.mean(axis=1)) / se > critical
    )
    exact = power_of_equivalence(true, sd, n, 0.05, margin)
    assert shown.mean() == pytest.approx(exact, abs=3 * math.sqrt(exact * (1 - exact) / draws))


def test_the_upper_tail_where_scipy_fails_is_integrated_not_guessed():
    assert noncentral_t_sf(8.86, 2, 11.0) == pytest.approx(0.78, abs=0.005)
    for critical, dof, nc in ((2.0, 4, 1.5), (4.3, 2, 3.0), (1.7, 11, 2.5)):
        assert noncentral_t_sf(critical, dof, nc) == pytest.approx(stats.nct.sf(critical, dof, nc))


def test_no_spread_is_no_test():
    verdict = judged([0.5, 0.5, 0.5])
    assert verdict.verdict == "inconclusive" and verdict.reason == NO_SPREAD
    assert verdict.seeds_for_difference is None and verdict.seeds_for_equivalence is None
    assert NO_SPREAD == "no spread: no test"


def test_two_seeds_give_no_verdict_word():
    verdict = judged([0.10, 0.05])  # TOST p 0.009: an equivalence from one degree of freedom
    assert verdict.holm_tost_p < 0.05
    assert verdict.verdict == "inconclusive"
    assert verdict.reason == "2 seeds: a verdict needs 3 or more"


def test_inconclusive_rows_say_how_many_seeds_a_verdict_needs():
    verdict = judged([1.0, -0.5, 1.5, 0.2, 0.8])  # mean 0.6, sd 0.77
    assert verdict.verdict == "inconclusive"
    assert verdict.seeds_for_difference > 5 and verdict.seeds_for_equivalence > 5
    assert f"{verdict.seeds_for_difference} seeds for better/worse" in verdict.reason


def test_the_pooled_spread_weights_each_comparison_by_its_degrees_of_freedom():
    a, b = difference([1.0, 2.0, 3.0]), difference([0.0, 2.0, 4.0, 0.0, 4.0])
    expected = math.sqrt((2 * a.sd**2 + 4 * b.sd**2) / 6)
    assert pooled_sd([a, b, difference([5.0])]) == pytest.approx(expected)
    assert pooled_sd([difference([5.0])]) is None
