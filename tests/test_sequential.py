"""Group-sequential boundaries against a published table, and the plan's error rates simulated."""

import numpy as np
import pytest
from scipy import stats

from minimt.study.sequential import (
    DIFFERENCE,
    EQUIVALENCE,
    claim_statistics,
    nominal_p,
    obrien_fleming_spent,
    simulate_plan,
    spent_at_each_look,
    t_boundaries,
    z_boundaries,
)
from tests.helpers import PLANS

Q8_LOOKS = next(f.looks for f in PLANS.families_of("study_cpu") if f.question == "Q8")

ALPHA, MARGIN, DRAWS = 0.05, 1.0, 200_000


def test_obrien_fleming_spending_spends_alpha_by_the_last_look_and_little_early():
    assert obrien_fleming_spent(0.05, 1.0) == pytest.approx(0.05, abs=1e-12)
    # 2 - 2 Phi(1.96 / sqrt(1/3)) (the third audit's section 5: 0.00069, 0.0164 cumulative)
    assert obrien_fleming_spent(0.05, 1 / 3) == pytest.approx(0.000687, abs=1e-6)
    assert sum(spent_at_each_look(0.05, (4, 8, 12))) == pytest.approx(0.05, abs=1e-12)
    assert np.cumsum(spent_at_each_look(0.05, (4, 8, 12)))[1] == pytest.approx(0.0164, abs=1e-4)


def test_z_boundaries_match_the_published_three_look_obrien_fleming_table():
    # Lan-DeMets O'Brien-Fleming type, one-sided 0.05, three equally spaced looks
    assert z_boundaries(0.05, (4, 8, 12)) == pytest.approx([3.200, 2.141, 1.695], abs=6e-4)
    # one-sided 0.025 (two-sided 0.05), the same looks: 3.710, 2.511, 1.993
    assert z_boundaries(0.025, (1, 2, 3)) == pytest.approx([3.710, 2.511, 1.993], abs=6e-4)


def test_one_look_is_the_fixed_design():
    assert z_boundaries(0.05, (12,)) == pytest.approx([stats.norm.isf(0.05)], abs=1e-9)
    assert t_boundaries(0.05, (12,)) == pytest.approx((stats.t.isf(0.05, 11),), abs=1e-9)


def test_t_boundaries_are_wider_than_the_z_ones_turned_into_nominal_p():
    z = z_boundaries(0.05, Q8_LOOKS)
    from_z = [stats.t.isf(stats.norm.sf(c), n - 1) for c, n in zip(z, Q8_LOOKS, strict=True)]
    calibrated = t_boundaries(0.05, Q8_LOOKS)
    assert calibrated[0] == pytest.approx(from_z[0], rel=1e-9)  # the first look is exact
    assert all(c > f for c, f in zip(calibrated[1:], from_z[1:], strict=True))
    assert nominal_p(0.05, Q8_LOOKS)[0] == pytest.approx(spent_at_each_look(0.05, Q8_LOOKS)[0])


def test_t_boundaries_spend_each_looks_share_on_fresh_null_paths():
    """Fresh draws, not the calibration's: the share of t paths that first cross at each look is
    that look's share of alpha, within 3 Monte Carlo standard errors."""
    rng = np.random.default_rng(7)
    draws = rng.standard_normal((DRAWS, Q8_LOOKS[-1]))
    going = np.ones(DRAWS, bool)
    for n, c, share in zip(
        Q8_LOOKS, t_boundaries(0.05, Q8_LOOKS), spent_at_each_look(0.05, Q8_LOOKS), strict=True
    ):
        d = draws[:, :n]
        t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
        first = going & (t >= c)
        assert first.mean() == pytest.approx(share, abs=3 * np.sqrt(share / DRAWS) + 1e-4)
        going &= ~first


def test_claim_statistics_are_the_paired_t_and_the_smaller_tost_t():
    differences = np.array([[0.5, -0.2, 0.3, 0.1]])
    mean, se = differences.mean(), differences.std(ddof=1) / 2
    found = claim_statistics(differences, 1.0)
    assert found[DIFFERENCE][0] == pytest.approx(abs(mean) / se)
    assert found[EQUIVALENCE][0] == pytest.approx(min((mean + 1) / se, (1 - mean) / se))


# alpha plus 3 Monte Carlo standard errors of a rate of alpha over DRAWS draws
LIMIT = ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / DRAWS)


@pytest.mark.parametrize("effects", [(0.0, 0.0, 0.0), (0.0, 0.0, 3.0)], ids=["all", "two"])
def test_the_plan_shows_a_false_difference_at_most_alpha_family_wise(effects):
    # a tiny margin: no arm ever stops for equivalence, the difference procedure runs alone
    result = simulate_plan(effects, 0.9, Q8_LOOKS, ALPHA, 1e-9, DRAWS, seed=1)
    assert result["false_difference"] <= LIMIT


@pytest.mark.parametrize(
    "effects", [(1.0, 1.0, 1.0), (-1.0, 1.0, -1.0), (1.0, 1.0, 0.0)], ids=["all", "mixed", "two"]
)
def test_the_plan_shows_a_false_equivalence_at_most_alpha_family_wise(effects):
    result = simulate_plan(effects, 0.9, Q8_LOOKS, ALPHA, MARGIN, DRAWS, seed=2)
    assert result["false_equivalence"] <= LIMIT


def test_the_plan_shows_large_effects_early_and_small_ones_equivalent():
    result = simulate_plan((0.0, -3.0, 3.0), 0.9, Q8_LOOKS, ALPHA, MARGIN, 20_000, seed=3)
    assert result["shown_difference"][1] > 0.99 and result["shown_difference"][2] > 0.99
    assert result["shown_equivalence"][0] > 0.75  # power 0.79 at sd 0.9
    assert result["expected_runs"] < 4 * 12
