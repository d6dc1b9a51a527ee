"""Length behaviour: joining consecutive sentences, source-length buckets, BLEU per bucket."""

import math

import pytest

from minimt.study.report import DEFAULT_EDGES, bleu_by_bucket, length_buckets
from minimt.study.views import join_consecutive


def test_join_consecutive_joins_k_pairs_and_drops_the_incomplete_tail():
    src = ["a1", "a2", "a3", "a4", "a5"]
    tgt = ["b1", "b2", "b3", "b4", "b5"]
    assert join_consecutive((src, tgt), 2) == (["a1 a2", "a3 a4"], ["b1 b2", "b3 b4"])
    assert join_consecutive((src, tgt), 3) == (["a1 a2 a3"], ["b1 b2 b3"])
    assert join_consecutive((src, tgt), 1) == (src, tgt)
    assert join_consecutive((src, tgt), 6) == ([], [])
    with pytest.raises(ValueError, match="k must be at least 1"):
        join_consecutive((src, tgt), 0)


def test_every_length_falls_in_exactly_one_bucket():
    lengths = list(range(200))
    buckets = length_buckets(lengths, DEFAULT_EDGES)
    assert len(buckets) == len(lengths)
    for length, b in zip(lengths, buckets, strict=True):
        inside = [i for i in range(len(DEFAULT_EDGES) - 1) if DEFAULT_EDGES[i] <= length]
        inside = [i for i in inside if length < DEFAULT_EDGES[i + 1]]
        assert inside == [b]
    assert length_buckets([0, 9, 10, 14, 15, 24, 25, 1000]) == [0, 0, 1, 1, 2, 3, 4, 4]


@pytest.mark.parametrize("edges", [(1, 10, math.inf), (0, 10, 20), (0, 10, 10, math.inf)])
def test_edges_that_could_miss_or_double_count_a_sentence_are_refused(edges):
    with pytest.raises(ValueError, match="rise strictly from 0 to inf"):
        length_buckets([5], edges)


def test_bleu_by_bucket_counts_every_sentence_once_and_scores_each_bucket():
    srcs = [" ".join(["w"] * n) for n in (3, 5, 12, 12, 30)]
    refs = [f"the dog number {i} runs across the green field" for i in range(5)]
    hyps = list(refs)
    hyps[2] = "nothing in common here at all"  # spoils the 10-14 bucket only
    rows = bleu_by_bucket(hyps, refs, srcs, DEFAULT_EDGES)
    assert [r["bucket"] for r in rows] == ["0-9", "10-14", "15-19", "20-24", "25+"]
    assert [r["n"] for r in rows] == [2, 2, 0, 0, 1]
    assert rows[0]["bleu"] == pytest.approx(100.0) and rows[4]["bleu"] == pytest.approx(100.0)
    assert rows[1]["bleu"] < 100.0
    assert rows[2]["bleu"] is None  # empty bucket
    with pytest.raises(ValueError, match="must align"):
        bleu_by_bucket(hyps, refs, srcs[:4])
