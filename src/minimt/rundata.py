"""A run's data: raw splits, BPE tokenizers and token-count batches, ready for training."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from minimt.corpus import load_multi30k, read_parallel
from minimt.data import BatchedPairs, filter_training_pairs, tokenize_pairs
from minimt.tokenizer import TokenizerPair, build_tokenizers

Pairs = tuple[list[str], list[str]]


@dataclass
class TextSplits:
    """Raw (source lines, target lines) for training, validation and each named test set."""

    train: Pairs
    val: Pairs
    tests: dict[str, Pairs]


def load_text_splits(data: DictConfig) -> TextSplits:
    """Read the corpus that `data` names (Multi30k or any parallel text), limited as configured."""
    if data.name == "multi30k":
        names = ["train", "val", *data.test_sets]
        splits = load_multi30k(data.url, data.dir, data.src_lang, data.tgt_lang, names)
        tests = {name: splits[name] for name in data.test_sets}
        train, val = splits["train"], splits["val"]
    else:
        train = read_parallel(data.train.src, data.train.tgt)
        val = read_parallel(data.val.src, data.val.tgt)
        tests = {"test": read_parallel(data.test.src, data.test.tgt)}
    return TextSplits(
        train=_first(train, data.max_train_pairs), val=_first(val, data.max_val_pairs), tests=tests
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


def prepare_data(cfg: DictConfig, run_dir: Path) -> RunData:
    """Read the corpus, train (or reuse) the BPE tokenizers, tokenize and batch."""
    splits = load_text_splits(cfg.data)
    tokenizers = build_tokenizers(
        *splits.train, cfg.tokenizer.vocab_size, cfg.tokenizer.joint, cache_dir=cfg.data.dir
    )
    tokenizers.save(run_dir)
    train_pairs = filter_training_pairs(
        tokenize_pairs(tokenizers, *splits.train), cfg.data.max_train_len
    )
    batch_tokens = cfg.trainer.batch_tokens
    return RunData(
        splits=splits,
        tokenizers=tokenizers,
        train_batches=BatchedPairs(train_pairs, batch_tokens, seed=cfg.trainer.seed),
        val_batches=BatchedPairs(tokenize_pairs(tokenizers, *splits.val), batch_tokens),
    )
