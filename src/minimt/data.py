"""Token ids for parallel text; padded batches built by token count from length-sorted buckets."""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import datasets
import torch
from torch import Tensor

from minimt.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair

log = logging.getLogger(__name__)


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


def tokenize_pairs(
    tokenizers: TokenizerPair, src_lines: Sequence[str], tgt_lines: Sequence[str]
) -> datasets.Dataset:
    """A Dataset with columns src, tgt (text) and src_ids, tgt_ids (BPE ids, no specials)."""

    def encode(rows: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        return {
            "src_ids": tokenizers.encode_src(rows["src"]),
            "tgt_ids": tokenizers.encode_tgt(rows["tgt"]),
        }

    pairs = datasets.Dataset.from_dict({"src": list(src_lines), "tgt": list(tgt_lines)})
    return pairs.map(encode, batched=True, batch_size=2000)


def filter_training_pairs(pairs: datasets.Dataset, max_len: int) -> datasets.Dataset:
    """Drop pairs with an empty side or more than `max_len` BPE tokens on either side (logged)."""
    keep, n_empty, n_long = [], 0, 0
    for i, (src, tgt) in enumerate(zip(pairs["src_ids"], pairs["tgt_ids"], strict=True)):
        if not src or not tgt:
            n_empty += 1
        elif len(src) > max_len or len(tgt) > max_len:
            n_long += 1
        else:
            keep.append(i)
    log.info(
        "training pairs: kept %d of %d (dropped %d with an empty side, %d longer than %d tokens)",
        len(keep),
        len(pairs),
        n_empty,
        n_long,
        max_len,
    )
    return pairs.select(keep)


def example_lengths(pairs: datasets.Dataset) -> list[int]:
    """Padded length each pair needs: the longer of src + <eos> and <bos> + tgt."""
    return [
        max(len(s), len(t)) + 1 for s, t in zip(pairs["src_ids"], pairs["tgt_ids"], strict=True)
    ]


def token_batches(
    lengths: Sequence[int], batch_tokens: int, rng: random.Random | None = None
) -> list[list[int]]:
    """Group example indices so that batch size x longest length <= batch_tokens.

    Indices are sorted by length (ties broken at random when `rng` is given) so each batch holds
    similar lengths and little padding; with `rng` the batch order is shuffled too. An example
    longer than `batch_tokens` gets a batch of its own.
    """
    tiebreak = [rng.random() for _ in lengths] if rng else [0.0] * len(lengths)
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], tiebreak[i]))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        # sorted ascending, so lengths[i] is the longest in the batch once added
        if current and lengths[i] * (len(current) + 1) > batch_tokens:
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    if rng:
        rng.shuffle(batches)
    return batches


def pad(seqs: Sequence[Sequence[int]]) -> Tensor:
    """Right-pad id lists with <pad> into a (B, max_len) long tensor."""
    out = torch.full((len(seqs), max(map(len, seqs))), PAD_ID, dtype=torch.long)
    for row, seq in enumerate(seqs):
        out[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
    return out


def source_tensor(src_ids: Sequence[Sequence[int]]) -> Tensor:
    """(B, S) padded source ids, each sentence ending in <eos>."""
    return pad([[*s, EOS_ID] for s in src_ids])


def collate(src_ids: Sequence[Sequence[int]], tgt_ids: Sequence[Sequence[int]]) -> Batch:
    """Add <eos>/<bos> and pad one batch of id lists."""
    return Batch(
        src=source_tensor(src_ids),
        tgt_in=pad([[BOS_ID, *t] for t in tgt_ids]),
        tgt_out=pad([[*t, EOS_ID] for t in tgt_ids]),
    )


class BatchedPairs:
    """Token-count batches over a tokenized Dataset; a new shuffle for every epoch when seeded."""

    def __init__(self, pairs: datasets.Dataset, batch_tokens: int, seed: int | None = None):
        self.src_ids: list[list[int]] = pairs["src_ids"]
        self.tgt_ids: list[list[int]] = pairs["tgt_ids"]
        self.lengths = example_lengths(pairs)
        self.batch_tokens = batch_tokens
        self.seed = seed

    def batches(self, epoch: int = 0) -> list[list[int]]:
        rng = None if self.seed is None else random.Random(self.seed * 100_003 + epoch)
        return token_batches(self.lengths, self.batch_tokens, rng)

    def collate(self, indices: Sequence[int]) -> Batch:
        """The padded batch of the pairs at `indices`."""
        return collate([self.src_ids[i] for i in indices], [self.tgt_ids[i] for i in indices])

    def iterate(self, epoch: int = 0) -> Iterator[Batch]:
        for indices in self.batches(epoch):
            yield self.collate(indices)
