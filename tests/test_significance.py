"""Seed-paired statistics against closed forms, Holm on a textbook example, and sacreBLEU's
paired bootstrap (the verdicts: test_verdicts.py)."""

import math
import random

import pytest

from minimt.study.significance import (
    PairedDifference,
    holm,
    paired_bootstrap,
    paired_difference,
    t_interval,
)

WORDS = "a dog man woman child runs sits on the in green red field street ball water".split()


def corpus(n: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(6, 14))) for _ in range(n)]


def t2_quantile(q: float) -> float:
    """Student t with 2 degrees of freedom has F(t) = 1/2 + t / (2 sqrt(2 + t^2))."""
    a = 2 * q - 1
    return math.sqrt(2 * a * a / (1 - a * a))


def test_the_t_interval_and_p_value_match_the_closed_form_for_three_seeds():
    differences = [1.0, 2.0, 3.0]  # mean 2, sample sd 1, n 3
    half = t2_quantile(0.975) / math.sqrt(3)
    assert t2_quantile(0.975) == pytest.approx(4.302653, abs=1e-6)  # the textbook table value
    assert t_interval(differences, 0.95) == pytest.approx((2 - half, 2 + half))
    assert t_interval(differences, 0.90) == pytest.approx(
        (2 - t2_quantile(0.95) / math.sqrt(3), 2 + t2_quantile(0.95) / math.sqrt(3))
    )
    t = 2 / (1 / math.sqrt(3))
    result = paired_difference([10.0, 10.0, 10.0], [11.0, 12.0, 13.0])
    assert result.seeds == 3 and result.mean == pytest.approx(2.0) and result.sd == 1.0
    assert result.p_value == pytest.approx(1 - t / math.sqrt(2 + t * t))  # 0.0742
    assert result.ci95 == pytest.approx((2 - half, 2 + half))


def test_differences_without_spread_have_a_point_interval():
    result = paired_difference([1.0, 2.0], [2.0, 3.0])
    assert result.ci95 == pytest.approx((1.0, 1.0)) and result.p_value == 0.0
    assert paired_difference([1.0, 2.0], [1.0, 2.0]).p_value == 1.0


def test_one_seed_has_no_interval_and_unaligned_scores_are_refused():
    assert paired_difference([30.0], [35.0]) == PairedDifference(1, 5.0, None, None, None, None)
    with pytest.raises(ValueError, match="one pair per seed"):
        paired_difference([1.0, 2.0], [1.0])


def test_holm_on_a_textbook_example():
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    assert holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.02]) == pytest.approx([0.02])
    assert holm([]) == []


def test_a_system_against_itself_has_p_1():
    refs = corpus()
    hyps = [" ".join(r.split()[:-1]) for r in refs]  # one word short: BLEU well below 100
    result = paired_bootstrap(hyps, hyps, refs, resamples=200)
    assert result.p_value == pytest.approx(1.0)
    assert result.system_bleu == pytest.approx(result.baseline_bleu)
    assert "bs:200" in result.signature and "seed:" in result.signature


def test_a_clearly_worse_system_has_a_small_p_value():
    refs = corpus()
    good = [" ".join(r.split()[:-1]) for r in refs]
    bad = [" ".join(r.split()[::2]) for r in refs]  # every other word
    result = paired_bootstrap(good, bad, refs, resamples=200)
    assert result.system_bleu < result.baseline_bleu - 20
    assert result.p_value < 0.05


def test_hypotheses_must_align_with_the_references():
    refs = corpus(10)
    with pytest.raises(ValueError, match="must align"):
        paired_bootstrap(refs, refs[:9], refs)
