"""Model FLOPs of the Transformer, counted from its shape (multiply-add = 2 FLOPs).

Per sentence pair with S source and T target tokens (<eos> / <bos> included), L_e encoder and
L_d decoder layers, width d, feed-forward width f, target vocabulary V:

    encoder layer   S (8 d^2 + 4 d f) + 4 S^2 d         projections, FFN; QK^T and AV
    decoder layer   T (8 d^2 + 4 d f) + 4 T^2 d         the same for self-attention
                    + 4 T d^2 + 4 S d^2 + 4 T S d       cross-attention: q, o; k, v; QK^T, AV
    output          2 T d V                             the tied projection
    training        3 x forward                         backward = 2 x forward

Attention is counted in full (T^2, not T^2 / 2) as the kernels compute it. Only real tokens count:
padding is waste, not model work (benchmark.py reports it separately).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from minimt.model.transformer import Transformer


@dataclass(frozen=True)
class Shape:
    d_model: int
    d_ff: int
    n_encoder_layers: int
    n_decoder_layers: int
    tgt_vocab_size: int

    @classmethod
    def of(cls, model: Transformer) -> Shape:
        layer = model.encoder_layers[0]
        return cls(
            d_model=layer.ffn.w1.in_features,
            d_ff=layer.ffn.w1.out_features,
            n_encoder_layers=len(model.encoder_layers),
            n_decoder_layers=len(model.decoder_layers),
            tgt_vocab_size=model.embedding.tgt_token_weight.size(0),
        )


def forward_flops(shape: Shape, src_len: int, tgt_len: int) -> int:
    """FLOPs of one forward pass over a pair of src_len and tgt_len tokens."""
    d, f, s, t = shape.d_model, shape.d_ff, src_len, tgt_len
    encoder_layer = s * (8 * d * d + 4 * d * f) + 4 * s * s * d
    decoder_layer = (
        t * (8 * d * d + 4 * d * f) + 4 * t * t * d + 4 * t * d * d + 4 * s * d * d + 4 * t * s * d
    )
    output = 2 * t * d * shape.tgt_vocab_size
    return shape.n_encoder_layers * encoder_layer + shape.n_decoder_layers * decoder_layer + output


def training_flops(shape: Shape, src_lens: Sequence[int], tgt_lens: Sequence[int]) -> int:
    """FLOPs of a training step (forward + backward) over pairs of these lengths."""
    return 3 * sum(forward_flops(shape, s, t) for s, t in zip(src_lens, tgt_lens, strict=True))
