"""The Transformer's input pipeline: token lookup, sqrt(d_model) scale, positions, dropout."""

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """(max_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    The paper's interleaved layout. An odd d_model works: its last (even) column is a sine.
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),)
    angle = position / 10000.0 ** (two_i / d_model)  # (max_len, ceil(d_model / 2))
    table = torch.empty(max_len, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.to(torch.get_default_dtype())


class SinusoidalPositions(nn.Module):
    """Adds the fixed sinusoidal table; no parameters and nothing in the state_dict."""

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()
        # Non-persistent: checkpoints neither store it nor break when max_seq_len changes.
        self.register_buffer("table", sinusoidal_table(max_seq_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int) -> Tensor:
        """(B, L, d_model) -> (B, L, d_model), positions offset..offset+L-1."""
        return x + self.table[offset : offset + x.size(1)]


class LearnedPositions(nn.Module):
    """Adds a trained (max_seq_len, d_model) table; positions unseen in training stay at init."""

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()
        self.table = nn.Embedding(max_seq_len, d_model)
        nn.init.normal_(self.table.weight, mean=0.0, std=0.02)

    def forward(self, x: Tensor, offset: int) -> Tensor:
        """(B, L, d_model) -> (B, L, d_model), positions offset..offset+L-1."""
        return x + self.table.weight[offset : offset + x.size(1)]


class NoPositions(nn.Module):
    """Adds nothing: pe=none (no position information) and pe=rope (positions enter attention)."""

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()

    def forward(self, x: Tensor, offset: int) -> Tensor:
        """(B, L, d_model) -> the same tensor."""
        return x


# The module adding positions to the token embedding; pe=rope also rotates queries and keys in
# self-attention (RotaryPositions, built by the Transformer, which knows the head dimension).
POSITIONAL_ENCODINGS: dict[str, type[nn.Module]] = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "none": NoPositions,
    "rope": NoPositions,
}


def rotary_tables(max_len: int, d_head: int, base: float = 10000.0) -> tuple[Tensor, Tensor]:
    """cos and sin of the rotary angles, each (max_len, d_head / 2): angle[pos, i] =
    pos * base^(-2i / d_head), the angle by which pair i of a vector at position pos turns."""
    if d_head % 2:
        raise ValueError(f"rotary positions rotate pairs of dimensions: d_head={d_head} is odd")
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_head, 2, dtype=torch.float64)  # (d_head / 2,)
    angle = position * base ** (-two_i / d_head)  # (max_len, d_head / 2)
    dtype = torch.get_default_dtype()
    return torch.cos(angle).to(dtype), torch.sin(angle).to(dtype)


class RotaryPositions(nn.Module):
    """Rotary position embedding (RoPE, Su et al., 2021) for queries or keys of one head size.

    Half-split (GPT-NeoX) layout: dimension i pairs with i + d_head/2, and pair i turns by
    angle pos * 10000^(-2i/d_head), so a rotated query-key dot product depends only on the
    positions' offset. No parameters; the tables are non-persistent buffers, never in checkpoints.
    """

    def __init__(self, max_seq_len: int, d_head: int):
        super().__init__()
        cos, sin = rotary_tables(max_seq_len, d_head)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, x: Tensor, offset: int) -> Tensor:
        """x (B, h, L, d_head) at positions offset..offset+L-1 -> rotated, same shape and dtype."""
        positions = slice(offset, offset + x.size(-2))
        cos = self.cos[positions].to(x.dtype)  # (L, d_head / 2)
        sin = self.sin[positions].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)  # each (B, h, L, d_head / 2)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def token_table(vocab_size: int, d_model: int, padding_idx: int) -> nn.Embedding:
    """Token table initialised N(0, d_model^-0.5), so that x sqrt(d_model) gives std 1."""
    table = nn.Embedding(vocab_size, d_model, padding_idx=padding_idx)
    nn.init.normal_(table.weight, mean=0.0, std=d_model**-0.5)
    with torch.no_grad():
        table.weight[padding_idx].zero_()
    return table


class Seq2SeqEmbedding(nn.Module):
    """Source and target embeddings: lookup -> x sqrt(d_model) -> + positions -> dropout.

    One positional module serves both sides (a learned table is shared by source and target).
    With share_embeddings the target table is the source table itself, which also makes it the
    model's output projection: three-way tying over one joint vocabulary.
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
        pos_encoding: str = "sinusoidal",
        scale_embedding: bool = True,
        share_embeddings: bool = False,
    ):
        super().__init__()
        if pos_encoding not in POSITIONAL_ENCODINGS:
            raise ValueError(
                f"pos_encoding must be one of {sorted(POSITIONAL_ENCODINGS)}, got {pos_encoding!r}"
            )
        if share_embeddings and (
            src_vocab_size != tgt_vocab_size or src_padding_idx != tgt_padding_idx
        ):
            raise ValueError(
                "share_embeddings ties source and target tables, which needs one joint vocabulary: "
                f"got src_vocab_size={src_vocab_size}, tgt_vocab_size={tgt_vocab_size}, "
                f"src_padding_idx={src_padding_idx}, tgt_padding_idx={tgt_padding_idx}"
            )
        self.d_model = d_model
        self.max_seq_len = max_seq_len
        self.scale = math.sqrt(d_model) if scale_embedding else 1.0
        self.src_tokens = token_table(src_vocab_size, d_model, src_padding_idx)
        if share_embeddings:
            self.tgt_tokens = self.src_tokens
        else:
            self.tgt_tokens = token_table(tgt_vocab_size, d_model, tgt_padding_idx)
        self.positions = POSITIONAL_ENCODINGS[pos_encoding](max_seq_len, d_model)
        self.dropout = nn.Dropout(dropout)

    @property
    def tgt_token_weight(self) -> nn.Parameter:
        """(tgt_vocab, d_model): the target table, reused as the output projection."""
        return self.tgt_tokens.weight

    def encode_source(self, ids: Tensor, offset: int = 0) -> Tensor:
        """(B, S) token ids at positions offset..offset+S-1 -> (B, S, d_model)."""
        return self._embed(self.src_tokens, ids, offset)

    def encode_target(self, ids: Tensor, offset: int = 0) -> Tensor:
        """(B, T) token ids at positions offset..offset+T-1 -> (B, T, d_model)."""
        return self._embed(self.tgt_tokens, ids, offset)

    def _embed(self, tokens: nn.Embedding, ids: Tensor, offset: int) -> Tensor:
        n_positions = offset + ids.size(1)
        if n_positions > self.max_seq_len:
            raise ValueError(
                f"sequence of {n_positions} positions (offset {offset} + length {ids.size(1)}) "
                f"exceeds max_seq_len={self.max_seq_len}"
            )
        x = tokens(ids) * self.scale  # (B, L, d_model)
        return self.dropout(self.positions(x, offset))
