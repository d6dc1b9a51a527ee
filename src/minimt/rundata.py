"""A run's data: raw splits, BPE tokenizers and token-count batches, ready for training.

The training text is streamed from its files (for the tokenizers, then into a cached Arrow table
of token ids), never loaded; validation and test sets are small and read as lists of lines.
"""

from __future__ import annotations

from dataclasses import dataclass

from omegaconf import DictConfig

from minimt.corpus import (
    Pairs,
    ParallelFiles,
    fetch_multi30k_pair,
    load_multi30k,
    parallel_files,
    read_parallel,
)
from minimt.data import (
    BatchedPairs,
    cached_token_pairs,
    filter_training_pairs,
    text_pairs,
    tokenize_pairs,
)
from minimt.tokenizer import TokenizerPair, build_tokenizers


@dataclass
class TextSplits:
    """The training files (streamed), and raw (source, target) lines of validation and tests."""

    train: ParallelFiles
    val: Pairs
    tests: dict[str, Pairs]


def load_text_splits(data: DictConfig) -> TextSplits:
    """Read the corpus that `data` names (Multi30k or any parallel text), limited as configured."""
    if data.name == "multi30k":
        held_out = load_multi30k(
            data.url, data.dir, data.src_lang, data.tgt_lang, ["val", *data.test_sets]
        )
        train_files = fetch_multi30k_pair(data.url, data.dir, "train", data.src_lang, data.tgt_lang)
        tests = {name: held_out[name] for name in data.test_sets}
        val = held_out["val"]
    else:
        train_files = (data.train.src, data.train.tgt)
        val = read_parallel(data.val.src, data.val.tgt)
        tests = {"test": read_parallel(data.test.src, data.test.tgt)}
    return TextSplits(
        train=parallel_files(*train_files, limit=data.max_train_pairs),
        val=_first(val, data.max_val_pairs),
        tests=tests,
    )


def _first(pairs: Pairs, n: int | None) -> Pairs:
    return pairs if n is None else (pairs[0][:n], pairs[1][:n])


@dataclass
class RunData:
    """A run's raw splits, tokenizers and token-count batches."""

    splits: TextSplits
    tokenizers: TokenizerPair
    train_batches: BatchedPairs
    val_batches: BatchedPairs


def prepare_data(cfg: DictConfig) -> RunData:
    """Train (or reuse) the BPE tokenizers, tokenize the training pairs (or reuse them), batch."""
    splits = load_text_splits(cfg.data)
    tokenizers = build_tokenizers(
        splits.train, cfg.tokenizer.vocab_size, cfg.tokenizer.joint, cache_dir=cfg.data.dir
    )
    train_pairs = filter_training_pairs(
        cached_token_pairs(splits.train, tokenizers, cfg.data.dir), cfg.data.max_train_len
    )
    batch_tokens = cfg.trainer.batch_tokens
    return RunData(
        splits=splits,
        tokenizers=tokenizers,
        train_batches=BatchedPairs(train_pairs, batch_tokens, seed=cfg.trainer.seed),
        val_batches=BatchedPairs(tokenize_pairs(tokenizers, text_pairs(*splits.val)), batch_tokens),
    )
