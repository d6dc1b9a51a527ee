"""A run's data: raw splits, BPE tokenizers and token-count batches, ready for training.

The one place where a config picks a corpus. The training text is streamed from its files (for
the tokenizers, then into a cached Arrow table of token ids), never loaded; validation and test
sets are small and read as lists of lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import DictConfig

from minimt.data.corpus import (
    DataError,
    Pairs,
    ParallelFiles,
    fetch_multi30k_pair,
    load_multi30k,
    parallel_files,
    read_parallel,
)
from minimt.data.tokenized import (
    BatchedPairs,
    cached_token_pairs,
    filter_training_pairs,
    text_pairs,
    tokenize_pairs,
)
from minimt.data.tokenizer import TokenizerPair, build_tokenizers

PARALLEL_TEXT_SPLITS = ("val", "test")


def test_set_names(data: DictConfig) -> list[str]:
    """The test sets a run scores at its end: Multi30k's data.test_sets, else `test`."""
    return list(data.test_sets) if data.name == "multi30k" else ["test"]


def load_held_out(data: DictConfig, names: Sequence[str]) -> dict[str, Pairs]:
    """(source lines, reference lines) of the named validation / test splits of a run's corpus.

    Multi30k has every split of the official release; data=parallel_text has `val` and `test`
    (the files its config names). An unknown name is a DataError that lists the known ones.
    """
    if data.name == "multi30k":
        return load_multi30k(data.url, data.dir, data.src_lang, data.tgt_lang, names)
    unknown = [name for name in names if name not in PARALLEL_TEXT_SPLITS]
    if unknown:
        raise DataError(
            f"split {', '.join(unknown)}: a data=parallel_text run has the splits "
            f"{', '.join(PARALLEL_TEXT_SPLITS)} (or score any files with src=... ref=...)"
        )
    return {name: read_parallel(data[name].src, data[name].tgt) for name in names}


@dataclass
class TextSplits:
    """The training files (streamed), and raw (source, target) lines of validation and tests."""

    train: ParallelFiles
    val: Pairs
    tests: dict[str, Pairs]


def load_text_splits(data: DictConfig) -> TextSplits:
    """Read the corpus that `data` names (Multi30k or any parallel text), limited as configured."""
    tests = test_set_names(data)
    held_out = load_held_out(data, ["val", *tests])
    if data.name == "multi30k":
        train_files = fetch_multi30k_pair(data.url, data.dir, "train", data.src_lang, data.tgt_lang)
    else:
        train_files = (data.train.src, data.train.tgt)
    return TextSplits(
        train=parallel_files(*train_files, limit=data.max_train_pairs),
        val=_first(held_out["val"], data.max_val_pairs),
        tests={name: held_out[name] for name in tests},
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
