"""Token-count batches: index groups by length, padded (B, L) tensors, collation ahead of use.
Numpy and torch only, so decoding (the Translator) needs neither `datasets` nor `pyarrow`."""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from minimt.data.tokenizer import BOS_ID, EOS_ID, PAD_ID

T = TypeVar("T")


@dataclass
class Batch:
    """src (B, S) ends in <eos>; tgt_in (B, T) starts with <bos>; tgt_out (B, T) ends in <eos>;
    nonpad_index (N,) the flat positions (row * T + column) of tgt_out's non-pad tokens, which the
    loss reads, found when the batch is collated, so that selecting them on a GPU needs no size
    from the device; num_tgt_tokens: N."""

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    nonpad_index: Tensor
    num_tgt_tokens: int

    def to(self, device: torch.device | str) -> Batch:
        """The batch on `device`. To a GPU through page-locked memory: a copy from there is
        queued without waiting, one from pageable memory first waits for the GPU's queued work."""
        pin = torch.device(device).type == "cuda"
        tensors = (self.src, self.tgt_in, self.tgt_out, self.nonpad_index)
        moved = [(t.pin_memory() if pin else t).to(device, non_blocking=True) for t in tensors]
        return Batch(*moved, self.num_tgt_tokens)


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
    longest = 0  # of the last batch
    for i in order:
        if batches and max(longest, lengths[i]) * (len(batches[-1]) + 1) <= batch_tokens:
            batches[-1].append(i)
            longest = max(longest, lengths[i])
        else:
            batches.append([i])
            longest = lengths[i]
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


def source_tensor(src_ids: Sequence[Sequence[int]]) -> Tensor:
    """(B, S) padded source ids, each sentence ending in <eos>."""
    return padded(*flat(src_ids), last=EOS_ID)


def flat_batch(src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray]) -> Batch:
    """The batch of rows given as (ids one after another, lengths) per side."""
    tgt_out = padded(*tgt, last=EOS_ID)
    nonpad_index = torch.from_numpy(np.flatnonzero(tgt_out.numpy() != PAD_ID))
    return Batch(
        src=padded(*src, last=EOS_ID),
        tgt_in=padded(*tgt, first=BOS_ID),
        tgt_out=tgt_out,
        nonpad_index=nonpad_index,
        num_tgt_tokens=len(nonpad_index),
    )


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
