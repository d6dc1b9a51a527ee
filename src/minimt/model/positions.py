"""Positional encodings: the base class a researcher subclasses, the built-in ones by name, and
the factory type the model takes (minimt/encoding_choice.py chooses one per side by name or
import path, with its options, from a config)."""

from __future__ import annotations

import math
from collections.abc import Callable

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
    queries and keys) or bias (its logits). Built as cls(max_seq_len, d_model, n_heads, **options),
    its options being keyword arguments (a config's `pe` section checks them against this
    signature). Every tensor a method returns lives on the model's device: add and rotate follow
    their input's device and dtype, bias is given the device to build on."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1):
        super().__init__()

    def add(self, x: Tensor, offset: int) -> Tensor:
        """(B, L, d_model) at positions offset..offset+L-1 -> (B, L, d_model), x's dtype."""
        return x

    def rotate(self, x: Tensor, offset: int) -> Tensor:
        """(B, h, L, d_head) queries or keys at positions offset..offset+L-1 -> the same shape
        and dtype."""
        return x

    def bias(
        self,
        n_queries: int,
        n_keys: int,
        offset: int = 0,
        causal: bool = False,
        *,
        device: torch.device | str | None = None,
    ) -> Tensor | None:
        """(h or 1, T, S) float32 logits bias on `device` for T queries at offset..offset+T-1 and
        S keys at 0..S-1 (-inf where j > i when causal), or None."""
        return None

    @property
    def adds(self) -> bool:
        """Whether the class overrides add: the model asks, never compares names."""
        return type(self).add is not PositionalEncoding.add

    @property
    def rotates(self) -> bool:
        return type(self).rotate is not PositionalEncoding.rotate

    @property
    def biases(self) -> bool:
        return type(self).bias is not PositionalEncoding.bias

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
        return x + self.table[offset : offset + x.size(1)].to(x.dtype)


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
        return x + self.table.weight[offset : offset + x.size(1)].to(x.dtype)


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

    def bias(
        self,
        n_queries: int,
        n_keys: int,
        offset: int = 0,
        causal: bool = False,
        *,
        device: torch.device | str | None = None,
    ) -> Tensor:
        device = self.slopes.device if device is None else device
        query = torch.arange(offset, offset + n_queries, device=device)[:, None]  # (T, 1)
        distance = (query - torch.arange(n_keys, device=device)).float()  # (T, S): i - j
        bias = -self.slopes.to(device).float()[:, None, None] * distance.abs()  # (h, T, S)
        # -inf, not a large finite number: exact under any dtype cast, and no row is fully masked
        # (a causal query sees its own key).
        return bias.masked_fill(distance < 0, -math.inf) if causal else bias


BUILT_IN_ENCODINGS: dict[str, type[PositionalEncoding]] = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "none": NoPositions,
    "rope": RotaryPositions,
    "alibi": AlibiBias,
}

# What the model takes per side: called as factory(max_seq_len, d_model, n_heads) when the model
# is built, so its random draws happen in the model's order. A PositionalEncoding subclass is one.
PositionsFactory = Callable[[int, int, int], PositionalEncoding]


def as_factory(positions: PositionsFactory | str) -> PositionsFactory:
    """A factory as it is, a built-in name (BUILT_IN_ENCODINGS) as its class."""
    if not isinstance(positions, str):
        return positions
    if positions not in BUILT_IN_ENCODINGS:
        raise ValueError(
            f"{positions!r} is neither a built-in encoding ({', '.join(BUILT_IN_ENCODINGS)}) nor a "
            "factory of positions: pass a PositionalEncoding subclass for any other encoding"
        )
    return BUILT_IN_ENCODINGS[positions]
