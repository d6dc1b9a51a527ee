"""A run's data: raw splits, BPE tokenizers and token-count batches, ready for training.

The one place where a config picks a corpus. The training text is streamed from its files (for
the tokenizers, then into a cached Arrow table of token ids), never loaded; validation and test
sets are small and read as lists of lines. The length split (length_split.py) decides which
training lines a run trains on and which it scores as long test sets.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import datasets
import numpy as np
from omegaconf import DictConfig

from minimt.data.corpus import DataError, Pairs, ParallelFiles, parallel_files, read_parallel
from minimt.data.length_split import (
    AS_LENGTH_SPLIT,
    LONG_PREFIX,
    TRAIN,
    LengthSplit,
    all_train,
    long_test_pairs,
    source_word_counts,
    split_by_length,
    subsample,
)
from minimt.data.multi30k import fetch_multi30k_pair, load_multi30k
from minimt.data.tokenized import (
    BatchedPairs,
    cached_token_pairs,
    filter_training_pairs,
    id_lengths,
    positions_needed,
    text_pairs,
    tokenize_pairs,
)
from minimt.data.tokenizer import TokenizerPair, build_tokenizers

log = logging.getLogger(__name__)

PARALLEL_TEXT_SPLITS = ("val", "test")


def test_set_names(data: DictConfig) -> list[str]:
    """The test sets a run scores at its end: Multi30k's data.test_sets (else `test`), then the
    long test sets of the length split that hold any pair (reads the training source file)."""
    names = _corpus_test_names(data)
    if data.long_tests_over is None:
        return names
    return names + length_split(data, training_files(data)).test_names


def _corpus_test_names(data: DictConfig) -> list[str]:
    return list(data.test_sets or []) if data.name == "multi30k" else ["test"]


def load_held_out(data: DictConfig, names: Sequence[str]) -> dict[str, Pairs]:
    """(source lines, reference lines) of the named validation / test splits of a run's corpus.

    Multi30k has every split of the official release; data=parallel_text has `val` and `test`
    (the files its config names); the length split adds its long_* test sets (read from the
    training files). An unknown name is a DataError that lists the known ones.
    """
    long_names = [name for name in names if name.startswith(LONG_PREFIX)]
    pairs = _corpus_splits(data, [name for name in names if name not in long_names])
    if long_names:
        train = training_files(data)
        pairs |= long_test_pairs(train, length_split(data, train), long_names)
    return {name: pairs[name] for name in names}


def _corpus_splits(data: DictConfig, names: Sequence[str]) -> dict[str, Pairs]:
    """The named splits that the corpus's own files hold."""
    if data.name == "multi30k":
        return load_multi30k(data.url, data.dir, data.src_lang, data.tgt_lang, names)
    unknown = [name for name in names if name not in PARALLEL_TEXT_SPLITS]
    if unknown:
        raise DataError(
            f"split {', '.join(unknown)}: a data=parallel_text run has the splits "
            f"{', '.join(PARALLEL_TEXT_SPLITS)}, and long_* with data.long_tests_over set "
            "(or score any files with src=... ref=...)"
        )
    return {name: read_parallel(data[name].src, data[name].tgt) for name in names}


def training_files(data: DictConfig) -> ParallelFiles:
    """The training files, streamed; only the first data.max_train_pairs pairs."""
    if data.name == "multi30k":
        files = fetch_multi30k_pair(data.url, data.dir, "train", data.src_lang, data.tgt_lang)
    else:
        files = (data.train.src, data.train.tgt)
    return parallel_files(*files, limit=data.max_train_pairs)


def length_split(data: DictConfig, train: ParallelFiles) -> LengthSplit:
    """Each training line's role under data.train_max_words and data.long_tests_over (every
    line trains, without reading the files, when both are null)."""
    max_words, over = data.train_max_words, data.long_tests_over
    if max_words is None and over is None:
        return all_train(train.num_pairs)
    return split_by_length(source_word_counts(train), max_words, over, data.long_bucket_edges)


@dataclass
class TextSplits:
    """The training files (streamed) and each line's role in them; raw (source, target) lines
    of validation and tests (long test sets included)."""

    train: ParallelFiles
    lengths: LengthSplit
    val: Pairs
    tests: dict[str, Pairs]


def load_text_splits(data: DictConfig) -> TextSplits:
    """Read the corpus that `data` names (Multi30k or any parallel text), limited as configured."""
    train = training_files(data)
    lengths = length_split(data, train)
    test_names = _corpus_test_names(data)
    held_out = _corpus_splits(data, ["val", *test_names])
    tests = {name: held_out[name] for name in test_names}
    tests |= long_test_pairs(train, lengths, lengths.test_names)
    val_src, val_tgt = held_out["val"]
    val = (val_src[: data.max_val_pairs], val_tgt[: data.max_val_pairs])
    return TextSplits(train, lengths, val, tests)


@dataclass
class RunData:
    """A run's raw splits, tokenizers and token-count batches (`val_batches`: the validation
    pairs that fit the position table, which the validation loss scores); `summary` (for
    metrics.json's "data"): the training pairs left after every filter, their longest source and
    target in BPE tokens without <bos>/<eos>, the validation pairs the loss skips and, per
    held-out set, the sources that translating cuts to fit the position table."""

    splits: TextSplits
    tokenizers: TokenizerPair
    train_batches: BatchedPairs
    val_batches: BatchedPairs
    summary: dict[str, int | dict[str, int]]


def prepare_data(cfg: DictConfig, tokenizers: TokenizerPair | None = None) -> RunData:
    """Train (or reuse) the BPE tokenizers on the training files less the long test pairs (or
    take `tokenizers`: a resumed run's own), tokenize the training files (or reuse them), keep
    the pairs to train on, batch."""
    data = cfg.data
    splits = load_text_splits(data)
    tokenizers = tokenizers or build_tokenizers(
        splits.train.without(splits.lengths.held_out_lines),
        cfg.tokenizer.vocab_size,
        cfg.tokenizer.joint,
        cache_dir=data.dir,
    )
    token_pairs = cached_token_pairs(splits.train, tokenizers, data.dir)  # row = line
    train_pairs = filter_training_pairs(token_pairs, data.max_train_len, splits.lengths.train_lines)
    if data.train_subsample is not None:
        size = subsample_size(data, splits, token_pairs)
        rows = subsample(len(train_pairs), size, cfg.trainer.seed)
        log.info(
            "training on %d random pairs of %d (data.train_subsample)", len(rows), len(train_pairs)
        )
        train_pairs = train_pairs.select(rows, keep_in_memory=True)
    batch_tokens, max_seq_len = cfg.trainer.batch_tokens, cfg.model.max_seq_len
    check_batch_tokens(train_pairs, batch_tokens=batch_tokens, max_train_len=data.max_train_len)
    val_pairs = tokenize_pairs(tokenizers, text_pairs(*splits.val))
    scored, skipped = validation_loss_pairs(val_pairs, max_seq_len=max_seq_len)
    cut = sources_cut(tokenizers, splits, max_seq_len=max_seq_len)
    return RunData(
        splits=splits,
        tokenizers=tokenizers,
        train_batches=BatchedPairs(train_pairs, batch_tokens, seed=cfg.trainer.seed),
        val_batches=BatchedPairs(scored, batch_tokens),
        summary=training_summary(train_pairs)
        | {"val_pairs_skipped_by_loss": skipped, "sources_cut": cut},
    )


def check_batch_tokens(pairs: datasets.Dataset, *, batch_tokens: int, max_train_len: int) -> None:
    """A DataError naming trainer.batch_tokens and data.max_train_len when the longest training
    pair needs more positions than a batch holds: its batch would exceed the budget that
    trainer.batch_tokens promises (and sizes memory by)."""
    longest = int(positions_needed(pairs).max(initial=0))
    if longest > batch_tokens:
        raise DataError(
            f"trainer.batch_tokens={batch_tokens} is smaller than the {longest} positions the "
            f"longest training pair needs (counting <bos>/<eos>; data.max_train_len="
            f"{max_train_len} keeps pairs of up to {max_train_len} tokens a side): raise "
            f"trainer.batch_tokens to at least {longest}, or lower data.max_train_len to "
            f"{max(batch_tokens - 1, 1)}"
        )


def validation_loss_pairs(
    pairs: datasets.Dataset, *, max_seq_len: int
) -> tuple[datasets.Dataset, int]:
    """The validation pairs whose source + <eos> and <bos> + target fit `max_seq_len` positions
    (those the validation loss scores), and how many are skipped (logged); a DataError naming
    model.max_seq_len when none fits."""
    needed = positions_needed(pairs)
    fits = needed <= max_seq_len
    skipped = int((~fits).sum())
    if len(pairs) and skipped == len(pairs):
        raise DataError(
            f"none of the {len(pairs)} validation pairs fits model.max_seq_len={max_seq_len} "
            f"positions (counting <bos>/<eos>): the longest needs {needed.max()}, the shortest "
            f"{needed.min()}; raise model.max_seq_len to {needed.max()} to score every one"
        )
    if skipped:
        log.warning(
            "the validation loss skips %d of %d validation pairs that need more than "
            "model.max_seq_len=%d positions (counting <bos>/<eos>; the longest needs %d); greedy "
            "BLEU still translates them, their sources cut to fit",
            skipped,
            len(pairs),
            max_seq_len,
            needed.max(),
        )
        pairs = pairs.select(np.flatnonzero(fits), keep_in_memory=True)
    return pairs, skipped


def sources_cut(
    tokenizers: TokenizerPair, splits: TextSplits, *, max_seq_len: int
) -> dict[str, int]:
    """Per held-out set (val, then the test sets): how many sources are longer than the
    max_seq_len - 1 tokens (room for <eos>) that the Translator keeps of a source (fit_to_model)."""
    held_out = {"val": splits.val, **splits.tests}
    counts = {
        name: sum(len(ids) >= max_seq_len for ids in tokenizers.encode_src(src))
        for name, (src, _) in held_out.items()
    }
    if any(counts.values()):
        log.info(
            "sources longer than model.max_seq_len=%d positions, cut to fit when translated: %s",
            max_seq_len,
            ", ".join(f"{name} {n}" for name, n in counts.items() if n),
        )
    return counts


def subsample_size(data: DictConfig, splits: TextSplits, token_pairs: datasets.Dataset) -> int:
    """data.train_subsample's M; `length_split`: as many pairs as a length split at
    data.long_tests_over words trains on (the trainable lines that short, after max_train_len)."""
    if data.train_subsample != AS_LENGTH_SPLIT:
        return data.train_subsample
    words = source_word_counts(splits.train)
    short = np.flatnonzero((splits.lengths.roles == TRAIN) & (words <= data.long_tests_over))
    return len(filter_training_pairs(token_pairs, data.max_train_len, short))


def training_summary(pairs: datasets.Dataset) -> dict[str, int]:
    """How many pairs a run trains on, and the longest source and target in BPE tokens."""
    src_len, tgt_len = id_lengths(pairs)
    return {
        "train_pairs": len(pairs),
        "train_max_src_tokens": int(src_len.max(initial=0)),
        "train_max_tgt_tokens": int(tgt_len.max(initial=0)),
    }
