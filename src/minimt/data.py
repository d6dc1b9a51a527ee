"""Token ids for parallel text (cached as memory-mapped Arrow); padded token-count batches.

Training pairs go from the text files to an on-disk Arrow table of ids without ever being held
in memory as a whole: batches gather their rows from the memory-mapped table.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import queue
import random
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import torch
from torch import Tensor

from minimt.atomic import atomic_write
from minimt.corpus import ParallelFiles
from minimt.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair

log = logging.getLogger(__name__)
T = TypeVar("T")

ID_FEATURES = datasets.Features(
    {
        "src_ids": datasets.List(datasets.Value("int32")),
        "tgt_ids": datasets.List(datasets.Value("int32")),
    }
)
ENCODE_BATCH = 1000  # rows tokenized (and held as Python lists) at a time
LENGTH_CHUNK = 65_536  # rows whose lengths are read at a time
# Bump when tokenization changes in a way that makes cached token ids stale.
_CACHE_FORMAT_VERSION = 1


@dataclass
class Batch:
    """src (B, S) ends in <eos>; tgt_in (B, T) starts with <bos>; tgt_out (B, T) ends in <eos>."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor

    def to(self, device: torch.device | str) -> Batch:
        return Batch(
            *(t.to(device, non_blocking=True) for t in (self.src, self.tgt_in, self.tgt_out))
        )

    @property
    def num_tgt_tokens(self) -> int:
        return int((self.tgt_out != PAD_ID).sum())

    @property
    def num_src_tokens(self) -> int:
        return int((self.src != PAD_ID).sum())


def text_pairs(src_lines: Sequence[str], tgt_lines: Sequence[str]) -> datasets.Dataset:
    """An in-memory Dataset with columns src, tgt (text): for small sets such as validation."""
    return datasets.Dataset.from_dict({"src": list(src_lines), "tgt": list(tgt_lines)})


def tokenize_pairs(
    tokenizers: TokenizerPair, text: datasets.Dataset, cache_file: Path | None = None
) -> datasets.Dataset:
    """A Dataset with columns src_ids, tgt_ids (BPE ids, no specials) for `text`'s src, tgt.

    Encodes `ENCODE_BATCH` rows at a time; with `cache_file` the ids are written there as Arrow
    and memory-mapped, else kept in memory.
    """

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
    """`corpus` tokenized, memory-mapped from <cache_dir>/token_ids/<key>.arrow (built if missing).

    The key digests both files' bytes, the pair limit and the tokenizers, so a change to any of
    them tokenizes again and an unchanged corpus is never tokenized twice.
    """
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
    """Stream the text into a temporary Arrow file, tokenize it into `path`, drop the text."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp, atomic_write(path) as out:
        text = datasets.Dataset.from_generator(
            corpus.rows, cache_dir=tmp, fingerprint=corpus.fingerprint
        )
        tokenize_pairs(tokenizers, text, cache_file=out)


def id_lengths(pairs: datasets.Dataset) -> tuple[np.ndarray, np.ndarray]:
    """(N,) source and (N,) target id counts, read from the Arrow list offsets chunk by chunk."""
    src, tgt = [np.zeros(0, np.int32)], [np.zeros(0, np.int32)]
    for chunk in pairs.with_format("arrow").iter(batch_size=LENGTH_CHUNK):
        src.append(pc.list_value_length(chunk["src_ids"]).to_numpy())
        tgt.append(pc.list_value_length(chunk["tgt_ids"]).to_numpy())
    return np.concatenate(src), np.concatenate(tgt)


def filter_training_pairs(pairs: datasets.Dataset, max_len: int) -> datasets.Dataset:
    """Drop pairs with an empty side or more than `max_len` BPE tokens on either side (logged)."""
    src_len, tgt_len = id_lengths(pairs)
    empty = (src_len == 0) | (tgt_len == 0)
    long = ~empty & ((src_len > max_len) | (tgt_len > max_len))
    keep = np.flatnonzero(~empty & ~long)
    log.info(
        "training pairs: kept %d of %d (dropped %d with an empty side, %d longer than %d tokens)",
        len(keep),
        len(pairs),
        empty.sum(),
        long.sum(),
        max_len,
    )
    # The kept row numbers stay in memory (8 bytes a pair); the rows stay in the Arrow file.
    return pairs.select(keep, keep_in_memory=True)


def example_lengths(pairs: datasets.Dataset) -> np.ndarray:
    """(N,) padded length each pair needs: the longer of src + <eos> and <bos> + tgt."""
    src_len, tgt_len = id_lengths(pairs)
    return np.maximum(src_len, tgt_len) + 1


def token_batches(
    lengths: Sequence[int],
    batch_tokens: int,
    rng: random.Random | None = None,
    by_length: bool = True,
) -> list[list[int]]:
    """Group example indices so that batch size x longest length <= batch_tokens.

    Indices are sorted by length (ties broken at random when `rng` is given) so each batch holds
    similar lengths and little padding; with `rng` the batch order is shuffled too. An example
    longer than `batch_tokens` gets a batch of its own. `by_length=False` fills batches in
    random order instead (needs `rng`): what toolkits without length buckets do.
    """
    tiebreak = [rng.random() for _ in lengths] if rng else [0.0] * len(lengths)
    if by_length:
        order = sorted(range(len(lengths)), key=lambda i: (lengths[i], tiebreak[i]))
    else:
        order = sorted(range(len(lengths)), key=tiebreak.__getitem__)
    batches: list[list[int]] = []
    current: list[int] = []
    longest = 0
    for i in order:
        if current and max(longest, lengths[i]) * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, lengths[i])
    if current:
        batches.append(current)
    if rng:
        rng.shuffle(batches)
    return batches


def padded(
    values: np.ndarray, lengths: np.ndarray, first: int | None = None, last: int | None = None
) -> Tensor:
    """(B, max length + added ids) long tensor: row i is [first] + its ids + [last], then <pad>.

    `values` holds the B rows' ids one after another, `lengths` (B,) how many each row has."""
    start = int(first is not None)
    width = int(lengths.max(initial=0)) + start + int(last is not None)
    out = np.full((len(lengths), width), PAD_ID, dtype=np.int64)
    rows = np.repeat(np.arange(len(lengths)), lengths)
    row_starts = np.cumsum(lengths) - lengths
    out[rows, np.arange(len(values)) - np.repeat(row_starts, lengths) + start] = values
    if first is not None:
        out[:, 0] = first
    if last is not None:
        out[np.arange(len(lengths)), lengths + start] = last
    return torch.from_numpy(out)


def flat(seqs: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(all ids one after another, (B,) lengths) of id lists."""
    lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    return np.fromiter(itertools.chain.from_iterable(seqs), np.int64, int(lengths.sum())), lengths


def pad(seqs: Sequence[Sequence[int]]) -> Tensor:
    """Right-pad id lists with <pad> into a (B, max_len) long tensor."""
    return padded(*flat(seqs))


def source_tensor(src_ids: Sequence[Sequence[int]]) -> Tensor:
    """(B, S) padded source ids, each sentence ending in <eos>."""
    return padded(*flat(src_ids), last=EOS_ID)


def flat_batch(src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray]) -> Batch:
    """The batch of rows given as (ids one after another, lengths) per side."""
    return Batch(
        src=padded(*src, last=EOS_ID),
        tgt_in=padded(*tgt, first=BOS_ID),
        tgt_out=padded(*tgt, last=EOS_ID),
    )


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> Batch:
    """Add <eos>/<bos> and pad one batch of id lists."""
    return flat_batch(flat(src_ids), flat(tgt_ids))


def prefetched(items: Iterator[T], depth: int) -> Iterator[T]:
    """`items`, produced up to `depth` ahead on a background thread (depth 0: on this one).

    Collating a batch is Python and numpy work that can overlap the model's step (torch releases
    the GIL in its kernels). Closing the returned generator stops the thread."""
    if depth == 0:
        yield from items
        return
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def put(item: object) -> None:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return
            except queue.Full:
                continue

    def produce() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                put(item)
            put(done)
        except BaseException as error:  # handed to the consumer, raised there
            put(error)

    thread = threading.Thread(target=produce, daemon=True, name="prefetch")
    thread.start()
    try:
        while (item := ready.get()) is not done:
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


def _flat_column(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(ids one after another, lengths) of an Arrow list<int32> column."""
    return (
        pc.list_flatten(column).to_numpy().astype(np.int64),
        pc.list_value_length(column).to_numpy().astype(np.int64),
    )


class BatchedPairs:
    """Token-count batches over a tokenized Dataset; a new shuffle for every epoch when seeded.

    Holds only the (N,) example lengths in memory; `collate` reads a batch's rows from the
    (memory-mapped) Dataset.
    """

    def __init__(self, pairs: datasets.Dataset, batch_tokens: int, seed: int | None = None):
        self.pairs = pairs
        self._rows = pairs.with_format("arrow")
        self.lengths = example_lengths(pairs)
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
        for indices in self.batches(epoch):
            yield self.collate(indices)
