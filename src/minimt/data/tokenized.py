"""Parallel text as token ids: the cached, memory-mapped Arrow table and its batches (training
pairs are never held in memory as a whole)."""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from minimt.atomic import atomic_write
from minimt.data.batching import Batch, flat_batch, token_batches
from minimt.data.corpus import ParallelFiles
from minimt.data.tokenizer import TokenizerPair
from minimt.locks import private_folder

log = logging.getLogger(__name__)

ID_FEATURES = datasets.Features(
    {column: datasets.List(datasets.Value("int32")) for column in ("src_ids", "tgt_ids")}
)
ENCODE_BATCH = 1000  # rows tokenized (and held as Python lists) at a time
LENGTH_CHUNK = 65_536  # rows whose lengths are read at a time
# Bump when tokenization changes in a way that makes cached token ids stale.
_CACHE_FORMAT_VERSION = 1


def text_pairs(src_lines: Sequence[str], tgt_lines: Sequence[str]) -> datasets.Dataset:
    """An in-memory Dataset with columns src, tgt (text): for small sets such as validation."""
    return datasets.Dataset.from_dict({"src": list(src_lines), "tgt": list(tgt_lines)})


def tokenize_pairs(
    tokenizers: TokenizerPair, text: datasets.Dataset, cache_file: Path | None = None
) -> datasets.Dataset:
    """A Dataset with columns src_ids, tgt_ids (BPE ids, no specials) for `text`'s src, tgt;
    with `cache_file` written there as Arrow and memory-mapped, else kept in memory."""

    def encode(rows: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return {
            "src_ids": tokenizers.encode_src(rows["src"]),
            "tgt_ids": tokenizers.encode_tgt(rows["tgt"]),
        }

    return text.map(
        encode,
        batched=True,
        batch_size=ENCODE_BATCH,
        remove_columns=text.column_names,
        features=ID_FEATURES,
        cache_file_name=None if cache_file is None else str(cache_file),
        keep_in_memory=cache_file is None,
    )


def cached_token_pairs(
    corpus: ParallelFiles, tokenizers: TokenizerPair, cache_dir: str | Path
) -> datasets.Dataset:
    """`corpus` tokenized, memory-mapped from <cache_dir>/token_ids/<key>.arrow (built if missing);
    the key digests both files' bytes, the pair limit and the tokenizers."""
    key = [corpus.fingerprint, tokenizers.fingerprint, _CACHE_FORMAT_VERSION]
    digest = hashlib.sha256(json.dumps(key).encode()).hexdigest()[:16]
    path = Path(cache_dir) / "token_ids" / f"{digest}.arrow"
    if path.is_file():
        log.info("loaded cached token ids from %s", path)
    else:
        log.info("tokenizing %d training pairs into %s", corpus.num_pairs, path)
        _write_token_pairs(corpus, tokenizers, path)
    return datasets.Dataset.from_file(str(path))


def _write_token_pairs(corpus: ParallelFiles, tokenizers: TokenizerPair, path: Path) -> None:
    """Stream the text into a temporary Arrow file, tokenize it into `path`, drop the text (and
    what an earlier preparation, killed, left of its own)."""
    with private_folder(path.parent) as tmp, atomic_write(path) as out:
        text = datasets.Dataset.from_generator(
            corpus.rows, cache_dir=str(tmp), fingerprint=corpus.fingerprint
        )
        tokenize_pairs(tokenizers, text, cache_file=out)


def id_lengths(pairs: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(N,) source and (N,) target id counts, read from the Arrow list offsets chunk by chunk."""
    src, tgt = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    for chunk in pairs.with_format("arrow").iter(batch_size=LENGTH_CHUNK):
        src.append(pc.list_value_length(chunk["src_ids"]).to_numpy())
        tgt.append(pc.list_value_length(chunk["tgt_ids"]).to_numpy())
    return np.concatenate(src), np.concatenate(tgt)


def positions_needed(pairs: datasets.Dataset) -> np.ndarray:
    """(N,) positions each pair takes in the model: the longer of source + <eos> and <bos> +
    target (the padded length of its batch row)."""
    return np.maximum(*id_lengths(pairs)) + 1


def filter_training_pairs(
    pairs: datasets.Dataset, max_len: int, rows: np.ndarray | None = None
) -> datasets.Dataset:
    """The pairs at `rows` (default: all), less those with an empty side or more than `max_len`
    BPE tokens on either side (counts logged)."""
    rows = np.arange(len(pairs)) if rows is None else rows
    src_len, tgt_len = (lengths[rows] for lengths in id_lengths(pairs))
    empty = (src_len == 0) | (tgt_len == 0)
    long = ~empty & ((src_len > max_len) | (tgt_len > max_len))
    keep = rows[~empty & ~long]
    log.info(
        "training pairs: kept %d of %d (dropped %d with an empty side, %d longer than %d tokens)",
        len(keep),
        len(rows),
        empty.sum(),
        long.sum(),
        max_len,
    )
    # The kept row numbers stay in memory (8 bytes a pair); the rows stay in the Arrow file.
    return pairs.select(keep, keep_in_memory=True)


def _flat_column(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(ids one after another, lengths) of an Arrow list<int32> column."""
    return (
        pc.list_flatten(column).to_numpy().astype(np.int64),
        pc.list_value_length(column).to_numpy().astype(np.int64),
    )


class BatchedPairs:
    """Token-count batches over a tokenized Dataset; a new shuffle for every epoch when seeded.
    Holds only the (N,) lengths in memory; `collate` reads rows from the memory-mapped Dataset."""

    def __init__(self, pairs: datasets.Dataset, batch_tokens: int, seed: int | None = None):
        self.pairs = pairs
        self._rows = pairs.with_format("arrow")
        self.lengths = positions_needed(pairs)
        self.batch_tokens = batch_tokens
        self.seed = seed

    def batches(self, epoch: int = 0, by_length: bool = True) -> list[list[int]]:
        rng = None if self.seed is None else random.Random(self.seed * 100_003 + epoch)
        return token_batches(self.lengths.tolist(), self.batch_tokens, rng, by_length)

    def collate(self, indices: Sequence[int]) -> Batch:
        """The padded batch of the pairs at `indices` (numpy from the Arrow columns, no lists)."""
        rows = self._rows[list(indices)]
        return flat_batch(*(_flat_column(rows[side]) for side in ("src_ids", "tgt_ids")))

    def iterate(self, epoch: int = 0) -> Iterator[Batch]:
        return map(self.collate, self.batches(epoch))
