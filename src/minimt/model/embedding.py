"""The Transformer's input pipeline: token lookup, sqrt(d_model) scale, positions, dropout."""

import inspect
import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn


def sinusoidal_table(max_len: int, d_model: int) -> Tensor:
    """(max_len, d_model): PE[pos, 2i] = sin(pos / 10000^(2i/d_model)), PE[pos, 2i+1] = cos(same).

    The paper's interleaved layout. An odd d_model works: its last (even) column is a sine.
    """
    position = torch.arange(max_len, dtype=torch.float64).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (ceil(d_model / 2),)
    angle = position / 10000.0 ** (two_i / d_model)  # (max_len, ceil(d_model / 2))
    table = torch.stack([angle.sin(), angle.cos()], dim=-1).flatten(1)  # sin, cos, sin, ...
    return table[:, :d_model].to(torch.get_default_dtype())


class PositionalEncoding(nn.Module):
    """Where each token is: a subclass overrides add (to the input), rotate (self-attention's
    queries and keys) or bias (its logits); built as cls(max_seq_len, d_model, n_heads, **options)
    and registered by name in POSITIONAL_ENCODINGS."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1):
        super().__init__()

    def add(self, x: Tensor, offset: int) -> Tensor:
        """(B, L, d_model) at positions offset..offset+L-1 -> (B, L, d_model)."""
        return x

    def rotate(self, x: Tensor, offset: int) -> Tensor:
        """(B, h, L, d_head) queries or keys at positions offset..offset+L-1 -> the same shape."""
        return x

    def bias(
        self, n_queries: int, n_keys: int, offset: int = 0, causal: bool = False
    ) -> Tensor | None:
        """(h, T, S) float32 logits bias for T queries at offset..offset+T-1 and S keys at 0..S-1
        (-inf where j > i when causal), or None."""
        return None

    # What the model asks: which of the three a subclass overrides.
    adds = property(lambda self: type(self).add is not PositionalEncoding.add)
    rotates = property(lambda self: type(self).rotate is not PositionalEncoding.rotate)
    biases = property(lambda self: type(self).bias is not PositionalEncoding.bias)

    @staticmethod
    def problem(d_model: int, n_heads: int) -> str | None:
        """Why the encoding cannot serve a model of these sizes, or None."""
        return None


class SinusoidalPositions(PositionalEncoding):
    """Adds the fixed sinusoidal table times `scale` (RMS 0.71 x scale); no parameters and
    nothing in the state_dict."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1, scale: float = 1.0):
        super().__init__(max_seq_len, d_model, n_heads)
        if not scale > 0:
            raise ValueError(f"the sinusoidal table's scale must be positive, got {scale}")
        table = sinusoidal_table(max_seq_len, d_model) * scale
        # Non-persistent: checkpoints neither store it nor break when max_seq_len changes.
        self.register_buffer("table", table, persistent=False)

    def add(self, x: Tensor, offset: int) -> Tensor:
        return x + self.table[offset : offset + x.size(1)]


class LearnedPositions(PositionalEncoding):
    """Adds a trained (max_seq_len, d_model) table initialised N(0, init_std): by default the
    sinusoid's RMS, so scaled tokens stand to positions as to sinusoids (GPT's and BERT's 0.02
    beside them trains worse). Positions unseen in training stay at their init."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1, init_std: float = 0.7071):
        super().__init__(max_seq_len, d_model, n_heads)
        if not init_std > 0:
            raise ValueError(f"the learned table's init_std must be positive, got {init_std}")
        self.table = nn.Embedding(max_seq_len, d_model)
        nn.init.normal_(self.table.weight, mean=0.0, std=init_std)

    def add(self, x: Tensor, offset: int) -> Tensor:
        return x + self.table.weight[offset : offset + x.size(1)]


class NoPositions(PositionalEncoding):
    """No position information at all (pe=none)."""


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


class RotaryPositions(PositionalEncoding):
    """Rotary position embedding (RoPE, Su et al., 2021), half-split (GPT-NeoX) layout: dimension
    i pairs with i + d_head/2. The tables are non-persistent buffers, never in checkpoints."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1):
        super().__init__(max_seq_len, d_model, n_heads)
        cos, sin = rotary_tables(max_seq_len, d_model // n_heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    @staticmethod
    def problem(d_model: int, n_heads: int) -> str | None:
        if (d_model // n_heads) % 2:
            return "rotates pairs of dimensions, so the head size must be even"
        return None

    def rotate(self, x: Tensor, offset: int) -> Tensor:
        """x (B, h, L, d_head) at positions offset..offset+L-1 -> rotated, same shape and dtype."""
        positions = slice(offset, offset + x.size(-2))
        cos = self.cos[positions].to(x.dtype)  # (L, d_head / 2)
        sin = self.sin[positions].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)  # each (B, h, L, d_head / 2)
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def alibi_slopes(n_heads: int) -> Tensor:
    """(n_heads,) float32 ALiBi slopes (Press et al., 2021): m_h = 2^(-8h/n) for h = 1..n when n
    is a power of 2; otherwise the n' = 2^floor(log2 n) slopes of n', then every other slope of
    2n' (the first n - n' of them), as the paper's code does."""
    if n_heads < 1:
        raise ValueError(f"ALiBi needs at least one head, got n_heads={n_heads}")

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]

    below = 2 ** math.floor(math.log2(n_heads))
    slopes = geometric(below) + geometric(2 * below)[0::2][: n_heads - below]
    return torch.tensor(slopes, dtype=torch.float32)


class AlibiBias(PositionalEncoding):
    """ALiBi (Press et al., 2021): head h adds -m_h |i - j| to the logit of query i for key j.
    Built in float32, where distances are exact; attention() rounds it to q's dtype once."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1):
        super().__init__(max_seq_len, d_model, n_heads)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def bias(self, n_queries: int, n_keys: int, offset: int = 0, causal: bool = False) -> Tensor:
        device = self.slopes.device
        query = torch.arange(offset, offset + n_queries, device=device)[:, None]  # (T, 1)
        distance = (query - torch.arange(n_keys, device=device)).float()  # (T, S): i - j
        bias = -self.slopes.float()[:, None, None] * distance.abs()  # (h, T, S)
        # -inf, not a large finite number: exact under any dtype cast, and no row is fully masked
        # (a causal query sees its own key).
        return bias.masked_fill(distance < 0, -math.inf) if causal else bias


POSITIONAL_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "none": NoPositions,
    "rope": RotaryPositions,
    "alibi": AlibiBias,
}


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

    pos_encoding serves both sides unless src_pos_encoding / tgt_pos_encoding override it; sides
    with one encoding share one module, `positions`, else get `positions["src"]` and
    `positions["tgt"]`. With share_embeddings the target table is the source table itself.
    pos_options are keyword arguments of the encodings' classes, each given to the classes that
    take it.
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
        *,
        src_pos_encoding: str | None = None,
        tgt_pos_encoding: str | None = None,
        init_std: float | None = None,
        pos_options: Mapping[str, float] | None = None,
        n_heads: int = 1,
    ):
        super().__init__()
        src_pos_encoding = pos_encoding if src_pos_encoding is None else src_pos_encoding
        tgt_pos_encoding = pos_encoding if tgt_pos_encoding is None else tgt_pos_encoding
        for argument, name in [
            ("pos_encoding", pos_encoding),
            ("src_pos_encoding", src_pos_encoding),
            ("tgt_pos_encoding", tgt_pos_encoding),
        ]:
            if name not in POSITIONAL_ENCODINGS:
                raise ValueError(
                    f"{argument} must be one of {sorted(POSITIONAL_ENCODINGS)}, got {name!r}"
                )
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

        def encoding(name: str) -> PositionalEncoding:
            takes = inspect.signature(POSITIONAL_ENCODINGS[name]).parameters
            options = {k: v for k, v in (pos_options or {}).items() if k in takes}
            return POSITIONAL_ENCODINGS[name](max_seq_len, d_model, n_heads, **options)

        if src_pos_encoding == tgt_pos_encoding:
            # One module: a learned table is shared, under the key positions.table.weight.
            self.positions = encoding(src_pos_encoding)
        else:
            self.positions = nn.ModuleDict(
                {"src": encoding(src_pos_encoding), "tgt": encoding(tgt_pos_encoding)}
            )
        self.dropout = nn.Dropout(dropout)

    def side_positions(self, side: str) -> PositionalEncoding:
        """The positional encoding of side "src" or "tgt" (one module when both use one)."""
        shared = not isinstance(self.positions, nn.ModuleDict)
        return self.positions if shared else self.positions[side]

    src_positions = property(lambda self: self.side_positions("src"))
    tgt_positions = property(lambda self: self.side_positions("tgt"))

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
