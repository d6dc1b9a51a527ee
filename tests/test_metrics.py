import random

import pytest

from minimt.metrics import corpus_scores

REFS = [
    "A man in a blue shirt is standing on a ladder.",
    "Two dogs run through the snow.",
    "A group of people stand in front of an igloo.",
    "A little girl climbing into a wooden playhouse.",
]
HYPS = [
    "A man in a blue shirt stands on a ladder.",
    "Two dogs are running in the snow.",
    "A group of people standing in front of an igloo.",
    "A girl climbs into a playhouse.",
]


def test_identical_text_scores_100_with_a_signature():
    scores = corpus_scores(REFS, REFS)
    assert scores.bleu == pytest.approx(100.0) and scores.chrf == pytest.approx(100.0)
    assert "nrefs:1" in scores.bleu_signature and "case:mixed" in scores.bleu_signature
    assert "tok:13a" in scores.bleu_signature


def test_bleu_is_a_corpus_score_on_a_0_to_100_scale():
    scores = corpus_scores(HYPS, REFS)
    assert 10 < scores.bleu < 90 and 10 < scores.chrf < 100


def test_joint_shuffle_leaves_the_score_unchanged():
    order = list(range(len(REFS)))
    random.Random(0).shuffle(order)
    shuffled = corpus_scores([HYPS[i] for i in order], [REFS[i] for i in order])
    assert shuffled.bleu == pytest.approx(corpus_scores(HYPS, REFS).bleu)


def test_case_matters():
    assert corpus_scores([r.lower() for r in REFS], REFS).bleu < 100


def test_misaligned_lists_are_an_error():
    with pytest.raises(ValueError, match="3 hypotheses but 4 references"):
        corpus_scores(HYPS[:3], REFS)


def test_no_sentences_are_an_error_not_a_score():
    with pytest.raises(ValueError, match="no sentences to score"):
        corpus_scores([], [])


def test_length_ratio_is_hypothesis_words_over_reference_words():
    # no punctuation: sacreBLEU's 13a tokens are the whitespace words
    scores = corpus_scores(["a b c", "d e f g h i"], ["a b c d e", "d e f g h"])
    assert scores.length_ratio == pytest.approx((3 + 6) / (5 + 5))
    assert corpus_scores(REFS, REFS).length_ratio == 1.0


def test_early_stop_share_counts_hypotheses_under_four_fifths_of_their_reference():
    refs = ["a b c d e", "a b c d e", "a b c d e f g h i j", "a b", "a b c d e f g h i j k l m n o"]
    hyps = ["a b c d", "a b c", "a b c d e f g", "a", "a b c d e f g h i j k l"]
    # 4/5 = 0.8 (not early), 3/5, 7/10, 1/2 (early), 12/15 = 0.8 exactly (not early)
    scores = corpus_scores(hyps, refs)
    assert scores.early_stop_share == pytest.approx(3 / 5)
    assert scores.as_dict()["early_stop_share"] == scores.early_stop_share
    assert scores.as_dict()["length_ratio"] == scores.length_ratio
    assert corpus_scores(REFS, REFS).early_stop_share == 0.0
