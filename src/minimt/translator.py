"""Translate lists of sentences with a trained model: batch by length, decode, detokenize."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from minimt.data import source_tensor, token_batches
from minimt.decoding import greedy_decode
from minimt.model import Transformer
from minimt.tokenizer import BOS_ID, EOS_ID, PAD_ID, TokenizerPair

log = logging.getLogger(__name__)


def fit_to_model(src_ids: list[list[int]], limit: int) -> list[list[int]]:
    """Cut sources longer than `limit` tokens to their first `limit`, with a warning naming them."""
    too_long = [i for i, ids in enumerate(src_ids) if len(ids) > limit]
    if too_long:
        shown = ", ".join(str(i + 1) for i in too_long[:10]) + (
            " ..." if len(too_long) > 10 else ""
        )
        log.warning(
            "%d source line(s) exceed the model's %d source tokens and are cut to that length "
            "(lines %s); train with a larger model.max_seq_len to translate them whole",
            len(too_long),
            limit,
            shown,
        )
    return [ids[:limit] for ids in src_ids]


def translate_lines(
    model: Transformer,
    tokenizers: TokenizerPair,
    lines: Sequence[str],
    *,
    batch_tokens: int,
    max_len_a: float,
    max_len_b: int,
) -> list[str]:
    """Greedy translations of `lines`, in input order; batches hold sentences of similar length.

    Runs under whatever autocast context the caller has entered.
    """
    device = next(model.parameters()).device
    src_ids = fit_to_model(tokenizers.encode_src(lines), model.max_seq_len - 1)  # room for <eos>
    lengths = [len(ids) + 1 for ids in src_ids]
    outputs: list[list[int]] = [[] for _ in lines]
    model.eval()
    for indices in token_batches(lengths, batch_tokens):
        src = source_tensor([src_ids[i] for i in indices]).to(device)
        hyps = greedy_decode(
            model,
            src,
            bos_id=BOS_ID,
            eos_id=EOS_ID,
            pad_id=PAD_ID,
            max_len_a=max_len_a,
            max_len_b=max_len_b,
        )
        for i, hyp in zip(indices, hyps, strict=True):
            outputs[i] = hyp
    return tokenizers.decode_tgt(outputs)
