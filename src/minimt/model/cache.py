"""Incremental decoding's keys and values: preallocated per layer, written in place, reordered
as beams move and sentences finish (Transformer.start_decoding builds them)."""

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass
class LayerCache:
    """One decoder layer's attention keys and values.

    Self-attention's, one row per hypothesis, are written in place into buffers
    (B * k, h, capacity, d_k), one position per step; self_k and self_v are their filled part,
    (B * k, h, length, d_k). Cross-attention's are one row per sentence, shared by its k rows.
    """

    k_buffer: Tensor  # (B * k, h, capacity, d_k)
    v_buffer: Tensor
    cross_k: Tensor  # (B, h, S, d_k), the encoder output's, computed once per sentence
    cross_v: Tensor
    length: int = 0  # positions filled

    @property
    def self_k(self) -> Tensor:
        return self.k_buffer[:, :, : self.length]

    @property
    def self_v(self) -> Tensor:
        return self.v_buffer[:, :, : self.length]

    def append(self, k: Tensor, v: Tensor) -> None:
        """Writes k, v (B * k, h, 1, d_k) at the next position."""
        if self.length == self.k_buffer.size(2):
            raise ValueError(f"decoder cache full: start_decoding's capacity is {self.length}")
        self.k_buffer[:, :, self.length : self.length + 1] = k
        self.v_buffer[:, :, self.length : self.length + 1] = v
        self.length += 1

    def reorder_self(self, rows: Tensor) -> None:
        """Keeps rows (N',) of the self-attention keys/values, in that order."""
        self.k_buffer = self._select_filled(self.k_buffer, rows)
        self.v_buffer = self._select_filled(self.v_buffer, rows)

    def _select_filled(self, buffer: Tensor, rows: Tensor) -> Tensor:
        """(N, h, capacity, d_k) buffer -> its rows `rows` (N',) at the filled positions, written
        back into buffer's own memory when N' <= N: fresh pages every beam step cost more than
        this extra copy (docs/performance.md)."""
        filled = buffer[:, :, : self.length].index_select(0, rows)  # (N', h, length, d_k)
        if rows.numel() > buffer.size(0):
            buffer = buffer.new_empty((rows.numel(), *buffer.shape[1:]))
        buffer = buffer[: rows.numel()]
        buffer[:, :, : self.length] = filled
        return buffer


@dataclass
class DecoderCache:
    """Incremental decoding state: per-layer keys/values, the source mask, the next position.

    Each of the B sentences is decoded as k rows (its beams in beam search; k = 1 at first).
    Self-attention keys/values live in buffers preallocated for `capacity` positions, written in
    place rather than concatenated onto a copy of the prefix every step (inference only). Built
    by Transformer.start_decoding; Transformer.decode_step updates it in place."""

    layers: list[LayerCache]
    src_mask: Tensor  # (B, 1, 1, S), True = real source token

    @property
    def position(self) -> int:
        """Position of the next target token fed in (<bos> is position 0): the filled length."""
        return self.layers[0].length

    @staticmethod
    def sentence_rows(sentences: Tensor, k: int) -> Tensor:
        """(B',) sentence indices -> (B' * k,) their rows, each sentence's k rows in a row."""
        return (sentences[:, None] * k + torch.arange(k, device=sentences.device)).view(-1)

    def reorder(self, indices: Tensor) -> None:
        """Keeps sentences indices (B',), in that order, each with its k rows: dropping finished
        sentences, or with k = 1 any reordering of the rows."""
        k = self.layers[0].k_buffer.size(0) // self.src_mask.size(0)  # rows per sentence
        rows = self.sentence_rows(indices, k)
        for layer in self.layers:
            layer.reorder_self(rows)
            layer.cross_k = layer.cross_k.index_select(0, indices)
            layer.cross_v = layer.cross_v.index_select(0, indices)
        self.src_mask = self.src_mask.index_select(0, indices)

    def reorder_beams(self, rows: Tensor) -> None:
        """Row i continues row rows[i] (B * k',) of its own sentence: beam reordering, or each
        sentence's row expanded to k' beams with arange(B).repeat_interleave(k'). Only the
        self-attention keys/values move; a sentence's rows share the rest."""
        for layer in self.layers:
            layer.reorder_self(rows)
