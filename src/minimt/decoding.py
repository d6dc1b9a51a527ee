"""Turning a trained Transformer into translations: batched greedy decoding."""

import torch
from torch import Tensor

from minimt.model import Transformer


def max_output_lengths(src_lengths: Tensor, a: float, b: int, cap: int) -> Tensor:
    """(B,) source lengths -> (B,) long: min(floor(a * len + b), cap), counting <eos>."""
    return torch.floor(src_lengths.double() * a + b).long().clamp(max=cap)


@torch.no_grad()
def greedy_decode(
    model: Transformer,
    src: Tensor,
    *,
    bos_id: int,
    eos_id: int,
    pad_id: int,
    max_len_a: float = 1.5,
    max_len_b: int = 10,
) -> list[list[int]]:
    """Batched greedy decoding: (B, S) padded source -> per sentence its ids, <bos>/<eos> stripped.

    Each sentence may emit at most max_output_lengths(len, max_len_a, max_len_b) tokens, capped so
    that <bos> + output fits in model.max_seq_len. Dropout is the caller's business (model.eval()).
    """
    src_lengths = (src != pad_id).sum(dim=1)  # (B,)
    max_lens = max_output_lengths(src_lengths, max_len_a, max_len_b, cap=model.max_seq_len - 1)
    memory = model.encode(src)  # (B, S, d_model)
    tgt = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = max_lens <= 0  # (B,)
    out_lengths = torch.zeros_like(max_lens)  # (B,) tokens kept, <eos> excluded
    for step in range(int(max_lens.max())):
        hidden = model.decode(tgt, memory, src)[:, -1:]  # (B, 1, d_model)
        next_token = model.project(hidden)[:, -1].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad_id)
        tgt = torch.cat([tgt, next_token[:, None]], dim=1)  # (B, step + 2)
        is_eos = next_token == eos_id
        out_lengths += (~finished & ~is_eos).long()
        finished |= is_eos | (step + 1 >= max_lens)
        if finished.all():
            break
    rows = tgt[:, 1:].tolist()
    return [row[:n] for row, n in zip(rows, out_lengths.tolist(), strict=True)]
