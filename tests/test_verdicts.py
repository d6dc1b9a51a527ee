"""The verdict protocol on fabricated seed scores: the family correction, the equivalence margin,
the detectable difference and the seeds needed against their closed forms, and a clear
difference and a clear equivalence at 5 seeds."""

import math

import pytest
from scipy import stats

from minimt.study.significance import paired_difference
from minimt.study.verdicts import (
    Rules,
    detectable_difference,
    family_verdicts,
    pooled_sd,
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
    assert judged(small, rules=Rules(0.05, 1.0, 0.8)).verdict in ("better", "equivalent")
    assert judged(small, rules=Rules(0.05, 0.5, 0.8)).verdict != "equivalent"
    d = difference(small)
    se = d.sd / math.sqrt(5)
    expected = max(stats.t.sf((0.5 + 1.0) / se, 4), stats.t.cdf((0.5 - 1.0) / se, 4))
    assert tost_p_value(d, 1.0) == pytest.approx(expected)


def test_a_real_but_small_effect_is_named():
    small = difference([-0.2, -1.2, -0.7, -0.3, -1.1])  # mean -0.7, p 0.026: interval excludes 0
    verdict = family_verdicts([small] * 3, RULES)[0]  # Holm p 0.077; TOST p 0.11
    assert small.ci95[1] < 0 and verdict.verdict == "inconclusive"
    assert verdict.reason.startswith("a real but small effect (inside ±1)")


def test_the_detectable_difference_against_the_closed_form():
    # n = 5, alpha 0.05, power 0.8, sd 1: (t_{0.975,4} + t_{0.8,4}) / sqrt(5), table values
    assert detectable_difference(1.0, 5, 0.05, 0.8) == pytest.approx(
        (2.776445 + 0.940965) / math.sqrt(5), abs=1e-5
    )
    # many seeds: the normal closed form (z_{0.975} + z_{0.8}) sd / sqrt(n)
    assert detectable_difference(2.0, 10_000, 0.05, 0.8) == pytest.approx(
        (1.959964 + 0.841621) * 2.0 / 100, rel=1e-3
    )
    # a family of 10: alpha / 10 per comparison
    assert detectable_difference(1.0, 5, 0.005, 0.8) == pytest.approx(
        (stats.t.ppf(0.9975, 4) + stats.t.ppf(0.8, 4)) / math.sqrt(5)
    )


def test_seeds_needed_are_the_fewest_that_reach_the_formula():
    n = seeds_for_difference(1.0, 1.0, 0.05, 0.8)
    assert (
        detectable_difference(1.0, n, 0.05, 0.8)
        <= 1.0
        < detectable_difference(1.0, n - 1, 0.05, 0.8)
    )
    assert n == 10  # (t_{0.975,9} + t_{0.8,9}) / 3 = 0.97; with 9 seeds 1.04
    assert seeds_for_difference(1.0, 0.0, 0.05, 0.8) is None
    m = seeds_for_equivalence(1.0, 0.0, 1.0, 0.05, 0.8)
    reach = [
        (stats.t.ppf(0.95, k - 1) + stats.t.ppf(0.8, k - 1)) / math.sqrt(k) for k in (m - 1, m)
    ]
    assert reach[1] <= 1.0 < reach[0]
    assert seeds_for_equivalence(1.0, 1.2, 1.0, 0.05, 0.8) is None  # outside the margin


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
