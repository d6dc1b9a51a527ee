"""The Transformer's input pipeline: token lookup, sqrt(d_model) scale, positions, dropout."""

import math

import torch
from torch import Tensor, nn

from minimt.model.positions import PositionalEncoding, PositionsFactory, as_factory


def token_table(vocab_size: int, d_model: int, padding_idx: int, std: float) -> nn.Embedding:
    """Token table initialised N(0, std) with a zero padding row. std = d_model^-0.5 makes the
    sqrt(d_model)-scaled lookup std 1; std = 1 is nn.Embedding's default."""
    table = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
    nn.init.normal_(table.weight, mean=0.0, std=std)
    with torch.no_grad():
        table.weight[padding_idx].zero_()
    return table


class Seq2SeqEmbedding(nn.Module):
    """Source and target embeddings: lookup -> x sqrt(d_model) -> + positions -> dropout.

    The constructor is the tutorial's: `pos_encoding` names both sides' encoding, a built-in
    (positions.BUILT_IN_ENCODINGS: sinusoidal, learned, none, rope, alibi) or a factory called as
    factory(max_seq_len, d_model, n_heads) (a PositionalEncoding subclass is one). The keyword-only
    src_positions / tgt_positions set one side each and take precedence over `pos_encoding` for
    that side. Sides with equal factories share one module, `positions`, else get
    `positions["src"]` and `positions["tgt"]`. With share_embeddings the target table is the
    source table itself.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        d_model: int,
        max_seq_len: int = 5000,
        dropout: float = 0.1,
        src_padding_idx: int = 0,
        tgt_padding_idx: int = 0,
        share_embeddings: bool = False,
        pos_encoding: PositionsFactory | str = "sinusoidal",
        *,
        src_positions: PositionsFactory | str | None = None,
        tgt_positions: PositionsFactory | str | None = None,
        scale_embedding: bool = True,
        init_std: float | None = None,
        n_heads: int = 1,
    ):
        super().__init__()
        if share_embeddings and (
            src_vocab_size != tgt_vocab_size or src_padding_idx != tgt_padding_idx
        ):
            raise ValueError(
                "share_embeddings ties source and target tables, which needs one joint vocabulary: "
                f"got src_vocab_size={src_vocab_size}, tgt_vocab_size={tgt_vocab_size}, "
                f"src_padding_idx={src_padding_idx}, tgt_padding_idx={tgt_padding_idx}"
            )
        if init_std is not None and not init_std > 0:
            raise ValueError(
                f"init_std must be positive (or None for d_model^-0.5), got {init_std}"
            )
        self.d_model = d_model
        self.max_seq_len = max_seq_len
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        std = d_model**-0.5 if init_std is None else init_std
        self.src_tokens = token_table(src_vocab_size, d_model, src_padding_idx, std)
        if share_embeddings:
            self.tgt_tokens = self.src_tokens
        else:
            self.tgt_tokens = token_table(tgt_vocab_size, d_model, tgt_padding_idx, std)
        src = as_factory(pos_encoding if src_positions is None else src_positions)
        tgt = as_factory(pos_encoding if tgt_positions is None else tgt_positions)
        if src == tgt:
            # One module: a learned table is shared, under the key positions.table.weight.
            self.positions = src(max_seq_len, d_model, n_heads)
        else:
            self.positions = nn.ModuleDict(
                {
                    "src": src(max_seq_len, d_model, n_heads),
                    "tgt": tgt(max_seq_len, d_model, n_heads),
                }
            )
        self.dropout = nn.Dropout(dropout)

    def side_positions(self, side: str) -> PositionalEncoding:
        """The positional encoding of side "src" or "tgt" (one module when both use one)."""
        shared = not isinstance(self.positions, nn.ModuleDict)
        return self.positions if shared else self.positions[side]

    @property
    def src_positions(self) -> PositionalEncoding:
        return self.side_positions("src")

    @property
    def tgt_positions(self) -> PositionalEncoding:
        return self.side_positions("tgt")

    @property
    def tgt_token_weight(self) -> nn.Parameter:
        """(tgt_vocab, d_model): the target table, the output projection when the model ties it."""
        return self.tgt_tokens.weight

    @torch.no_grad()
    def input_magnitudes(self, n_positions: int) -> dict[str, dict[str, float | None]]:
        """Per side ("src", "tgt"): the RMS of the scaled token vectors (padding row left out), of
        the positional signal added at positions 0..n_positions-1, and their ratio (None where
        nothing is added: none, rope, alibi)."""
        magnitudes = {}
        sides = (self.src_tokens, self.src_positions), (self.tgt_tokens, self.tgt_positions)
        for side, (tokens, positions) in zip(("src", "tgt"), sides, strict=True):
            rows = torch.arange(tokens.num_embeddings) != tokens.padding_idx
            token_rms = (tokens.weight[rows].float() * self.scale).pow(2).mean().sqrt().item()
            zeros = tokens.weight.new_zeros(1, min(n_positions, self.max_seq_len), self.d_model)
            position_rms = positions.add(zeros, 0).float().pow(2).mean().sqrt().item()
            ratio = token_rms / position_rms if position_rms > 0 else None
            magnitudes[side] = dict(token_rms=token_rms, position_rms=position_rms, ratio=ratio)
        return magnitudes

    def encode_source(self, ids: Tensor, offset: int = 0) -> Tensor:
        """(B, S) token ids at positions offset..offset+S-1 -> (B, S, d_model)."""
        return self._embed(self.src_tokens, self.src_positions, ids, offset)

    def encode_target(self, ids: Tensor, offset: int = 0) -> Tensor:
        """(B, T) token ids at positions offset..offset+T-1 -> (B, T, d_model)."""
        return self._embed(self.tgt_tokens, self.tgt_positions, ids, offset)

    def _embed(
        self, tokens: nn.Embedding, positions: PositionalEncoding, ids: Tensor, offset: int
    ) -> Tensor:
        n_positions = offset + ids.size(1)
        if n_positions > self.max_seq_len:
            raise ValueError(
                f"sequence of {n_positions} positions (offset {offset} + length {ids.size(1)}) "
                f"exceeds max_seq_len={self.max_seq_len}"
            )
        x = tokens(ids) * self.scale  # (B, L, d_model)
        return self.dropout(positions.add(x, offset))
