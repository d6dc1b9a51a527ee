"""The length split: each training pair's role by its source's whitespace word count.

After Varis & Bojar (2021), "Sequence length is a domain". With data.train_max_words=N a run
trains only on pairs whose source has at most N words. With data.long_tests_over=N (by default
the same N), a fixed half of the training pairs over N words, chosen by a permutation with a
constant seed, is held out and scored as test sets by source-length bucket (long_16-20,
long_21-25, long_26+ for N=15 and data.long_bucket_edges=[21, 26]), and all of them as one set,
pooled_long. The other half is left
unused by the length split; the random control (data.train_subsample) may draw from it, and both
runs see exactly the same long test sets.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from minimt.data.corpus import DataError, Pairs, ParallelFiles

log = logging.getLogger(__name__)

# Constant, never trainer.seed: every run holds out the same long pairs.
HELD_OUT_SEED = 2021
LONG_PREFIX = "long_"
# The long test sets scored as one (metrics.json "test"): hypotheses and references of every
# long_* set concatenated. Not a long_* name: it is no bucket.
POOLED_LONG = "pooled_long"
# A line's role: trained on, left unused, or (k >= 1) a pair of the k-th long test set.
TRAIN, UNUSED = 0, -1
# data.train_subsample=length_split: as many pairs as the length split at long_tests_over keeps.
AS_LENGTH_SPLIT = "length_split"


@dataclass(frozen=True)
class LengthSplit:
    """What each training line (0-based) is for, and the names of the long test sets."""

    roles: np.ndarray  # (N,) int16: TRAIN, UNUSED, or k >= 1 for the bucket bucket_names[k - 1]
    bucket_names: tuple[str, ...]  # every bucket, empty ones included

    @property
    def train_lines(self) -> np.ndarray:
        """(M,) line numbers of the pairs a run may train on, ascending."""
        return np.flatnonzero(self.roles == TRAIN)

    @property
    def held_out_lines(self) -> np.ndarray:
        """(H,) line numbers of the long test pairs, ascending."""
        return np.flatnonzero(self.roles > 0)

    @property
    def test_names(self) -> list[str]:
        """The long test sets that hold at least one pair, shortest first."""
        sizes = np.bincount(self.roles[self.roles > 0], minlength=len(self.bucket_names) + 1)
        return [name for name, size in zip(self.bucket_names, sizes[1:], strict=True) if size]


def all_train(num_pairs: int) -> LengthSplit:
    """No length split: every line trains."""
    return LengthSplit(np.full(num_pairs, TRAIN, np.int16), ())


def split_by_length(
    words: np.ndarray,
    train_max_words: int | None,
    long_tests_over: int | None,
    bucket_edges: Sequence[int],
) -> LengthSplit:
    """Each line's role from its (N,) source word counts `words`.

    Held out first: a fixed half (HELD_OUT_SEED) of the lines over `long_tests_over` words, in
    bucket k when lows[k-1] <= words < lows[k], lows = [long_tests_over + 1, *bucket_edges].
    Of the rest, lines over `train_max_words` are unused; all others train.
    """
    roles = np.full(len(words), TRAIN, np.int16)
    if train_max_words is not None:
        roles[words > train_max_words] = UNUSED
    if long_tests_over is None:
        return LengthSplit(roles, ())
    lows = bucket_lows(long_tests_over, bucket_edges)
    long = np.flatnonzero(words > long_tests_over)
    order = np.random.default_rng(HELD_OUT_SEED).permutation(len(long))
    held = long[order[: len(long) // 2]]
    roles[held] = np.searchsorted(lows, words[held], side="right")  # 1 .. len(lows)
    split = LengthSplit(roles, bucket_names(lows))
    counts = np.bincount(roles[held], minlength=len(lows) + 1)[1:]
    sizes = dict(zip(split.bucket_names, counts.tolist(), strict=True))
    log.info(
        "length split: %d pairs to train on, %d unused, long test sets (sources over %d words) %s",
        len(split.train_lines),
        int((roles == UNUSED).sum()),
        long_tests_over,
        ", ".join(f"{name}: {size}" for name, size in sizes.items()),
    )
    for name, size in sizes.items():
        if not size:
            log.info("long test set %s holds no pair: not scored", name)
    return split


def bucket_lows(long_tests_over: int, bucket_edges: Sequence[int]) -> list[int]:
    """The lower word counts of the long test buckets: long_tests_over + 1, then the edges."""
    lows = [long_tests_over + 1, *bucket_edges]
    if any(low <= lows[0] for low in lows[1:]):
        raise DataError(
            f"data.long_bucket_edges={list(bucket_edges)} must all be above "
            f"data.long_tests_over + 1 = {lows[0]}, where the first long test set starts: drop "
            "the smaller edges or lower data.long_tests_over"
        )
    return lows


def bucket_names(lows: Sequence[int]) -> tuple[str, ...]:
    """long_<lo>-<hi> for each bucket, long_<lo>+ for the last: lows [16, 21] -> long_16-20,
    long_21+."""
    closed = [f"{LONG_PREFIX}{lo}-{hi - 1}" for lo, hi in pairwise(lows)]
    return (*closed, f"{LONG_PREFIX}{lows[-1]}+")


def source_word_counts(files: ParallelFiles) -> np.ndarray:
    """(N,) whitespace word count of each source line, streamed from the file."""
    counts = (len(line.split()) for line in files.src_lines())
    return np.fromiter(counts, np.int32, count=files.num_pairs)


def long_test_pairs(
    files: ParallelFiles, split: LengthSplit, names: Sequence[str]
) -> dict[str, Pairs]:
    """(source lines, reference lines) of the named long test sets, read in one pass."""
    unknown = [name for name in names if name not in split.test_names]
    if unknown:
        known = ", ".join(split.test_names) or "none (data.long_tests_over is null)"
        raise DataError(f"no long test set {', '.join(unknown)}: this run's are {known}")
    wanted = {split.bucket_names.index(name) + 1: name for name in names}
    pairs: dict[str, Pairs] = {name: ([], []) for name in names}
    for role, src, tgt in zip(split.roles, files.src_lines(), files.tgt_lines(), strict=True):
        if role in wanted:
            pairs[wanted[role]][0].append(src)
            pairs[wanted[role]][1].append(tgt)
    return pairs


def subsample(num_rows: int, size: int, seed: int) -> np.ndarray:
    """(size,) row numbers out of `num_rows` drawn with `seed`, ascending."""
    if size > num_rows:
        raise DataError(
            f"data.train_subsample={size} asks for more pairs than the {num_rows} it draws from "
            "(the training pairs left after data.max_train_pairs, the held-out long tests, "
            "data.train_max_words and data.max_train_len): lower data.train_subsample"
        )
    return np.sort(np.array(random.Random(seed).sample(range(num_rows), size), dtype=np.int64))
