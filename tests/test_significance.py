"""Seed-paired statistics against closed forms and Holm on a textbook example (the verdicts:
test_verdicts.py)."""

import math

import pytest

from minimt.study.significance import PairedDifference, holm, paired_difference, sd_upper_limit


def t2_quantile(q: float) -> float:
    """Student t with 2 degrees of freedom has F(t) = 1/2 + t / (2 sqrt(2 + t^2))."""
    a = 2 * q - 1
    return math.sqrt(2 * a * a / (1 - a * a))


def test_the_t_interval_and_p_value_match_the_closed_form_for_three_seeds():
    differences = [1.0, 2.0, 3.0]  # mean 2, sample sd 1, n 3
    half = t2_quantile(0.975) / math.sqrt(3)
    assert t2_quantile(0.975) == pytest.approx(4.302653, abs=1e-6)  # the textbook table value
    t = 2 / (1 / math.sqrt(3))
    result = paired_difference([10.0, 10.0, 10.0], [10.0 + d for d in differences])
    assert result.seeds == 3 and result.mean == pytest.approx(2.0) and result.sd == 1.0
    assert result.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t))  # 0.0742
    assert result.ci95 == pytest.approx((2 - half, 2 + half))


def test_differences_without_spread_have_a_point_interval():
    result = paired_difference([1.0, 2.0], [2.0, 3.0])
    assert result.ci95 == pytest.approx((1.0, 1.0)) and result.p_value == 0.0
    assert paired_difference([1.0, 2.0], [1.0, 2.0]).p_value == 1.0


def test_one_seed_has_no_interval_and_unaligned_scores_are_refused():
    assert paired_difference([30.0], [35.0]) == PairedDifference(1, 5.0, None, None, None)
    with pytest.raises(ValueError, match="one pair per seed"):
        paired_difference([1.0, 2.0], [1.0])


def test_holm_on_a_textbook_example():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []


def test_the_sd_upper_limit_matches_the_chi_square_closed_form_for_two_degrees():
    """Chi-square with 2 degrees of freedom has F(x) = 1 - exp(-x / 2): the one-sided upper
    limit at confidence c is sd sqrt(2 / (-2 ln c)); with many degrees it nears the sd itself."""
    for confidence in (0.8, 0.95):
        expected = 0.7 * math.sqrt(2 / (-2 * math.log(confidence)))
        assert sd_upper_limit(0.7, 2, confidence) == pytest.approx(expected, rel=1e-12)
    assert 0.7 < sd_upper_limit(0.7, 10_000, 0.8) < 0.7 * 1.01
