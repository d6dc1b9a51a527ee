"""Length behaviour: BLEU by source-length bucket, and longer inputs made by joining sentences."""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import pairwise

from minimt.data.corpus import Pairs
from minimt.metrics import corpus_scores

# Source-length buckets in words: [0, 10), [10, 15), ..., [25, inf).
DEFAULT_EDGES = (0, 10, 15, 20, 25, math.inf)


def join_consecutive(pairs: Pairs, k: int) -> Pairs:
    """Join each k consecutive pairs with a space, source and target alike; an incomplete
    group at the end is dropped."""
    if k < 1:
        raise ValueError(f"k must be at least 1, got {k}")
    src, tgt = pairs
    usable = len(src) - len(src) % k
    return (
        [" ".join(src[i : i + k]) for i in range(0, usable, k)],
        [" ".join(tgt[i : i + k]) for i in range(0, usable, k)],
    )


def length_buckets(lengths: Sequence[int], edges: Sequence[float] = DEFAULT_EDGES) -> list[int]:
    """The bucket of each length: i where edges[i] <= length < edges[i + 1].

    `edges` must rise strictly from 0 to inf, so that every length falls in exactly one bucket.
    """
    if edges[0] != 0 or edges[-1] != math.inf or any(a >= b for a, b in pairwise(edges)):
        raise ValueError(f"bucket edges must rise strictly from 0 to inf, got {tuple(edges)}")
    return [bisect_right(edges, length) - 1 for length in lengths]


def bucket_label(lower: float, upper: float) -> str:
    """'10-14' for the words in [10, 15); '25+' for [25, inf)."""
    return f"{lower:g}+" if upper == math.inf else f"{lower:g}-{upper - 1:g}"


def bleu_by_bucket(
    hyps: Sequence[str],
    refs: Sequence[str],
    srcs: Sequence[str],
    edges: Sequence[float] = DEFAULT_EDGES,
) -> list[dict]:
    """Corpus BLEU of the sentences in each source-length bucket (words split on whitespace):
    [{"bucket": label, "n": sentences, "bleu": BLEU or None when empty}] in bucket order."""
    if not len(hyps) == len(refs) == len(srcs):
        raise ValueError(
            f"{len(hyps)} hypotheses, {len(refs)} references and {len(srcs)} sources: "
            "they must align"
        )
    buckets = length_buckets([len(s.split()) for s in srcs], edges)
    rows = []
    for i, (lower, upper) in enumerate(pairwise(edges)):
        members = [j for j, b in enumerate(buckets) if b == i]
        bleu = (
            corpus_scores([hyps[j] for j in members], [refs[j] for j in members]).bleu
            if members
            else None
        )
        rows.append({"bucket": bucket_label(lower, upper), "n": len(members), "bleu": bleu})
    return rows
