"""sacreBLEU's paired bootstrap: no difference from itself, a clear one from a worse system."""

import random

import pytest

from minimt.study.significance import paired_bootstrap

WORDS = "a dog man woman child runs sits on the in green red field street ball water".split()


def corpus(n: int = 60, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(WORDS, k=rng.randint(6, 14))) for _ in range(n)]


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
