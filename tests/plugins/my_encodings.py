"""Positional encodings written outside minimt, one of each kind (adds to the input, rotates
queries and keys, biases attention logits), as a researcher would: selected by import path
(`pe.encoder=my_encodings.BinaryPositions`) with this folder on PYTHONPATH. Every tensor a method
makes lives on its input's device or the device it is given."""

import math

import torch
from torch import Tensor

from minimt.model.positions import PositionalEncoding


class BinaryPositions(PositionalEncoding):
    """Adds each position's binary digits as +-scale in the first log2(max_seq_len) dimensions."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1, scale: float = 0.5):
        super().__init__(max_seq_len, d_model, n_heads)
        if not scale > 0:
            raise ValueError(f"scale must be positive, got {scale}")
        bits = min(d_model, math.ceil(math.log2(max_seq_len)))
        digits = (torch.arange(max_seq_len)[:, None] >> torch.arange(bits)) & 1  # (L, bits)
        table = torch.zeros(max_seq_len, d_model)
        table[:, :bits] = scale * (2.0 * digits - 1)
        self.register_buffer("table", table, persistent=False)

    def add(self, x: Tensor, offset: int) -> Tensor:
        return x + self.table[offset : offset + x.size(1)].to(x.dtype)


class ReversedRotary(PositionalEncoding):
    """Turns each query and key by minus its position (radians) in every pair of dimensions."""

    def rotate(self, x: Tensor, offset: int) -> Tensor:
        positions = torch.arange(offset, offset + x.size(-2), device=x.device, dtype=x.dtype)
        angle = -positions[:, None]  # (L, 1)
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = angle.cos(), angle.sin()
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    @staticmethod
    def problem(d_model: int, n_heads: int) -> str | None:
        return "needs an even head size" if (d_model // n_heads) % 2 else None


class DistancePenalty(PositionalEncoding):
    """Biases every head's logits by -|i - j| x slope (and hides later keys when causal)."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1, slope: float = 0.25):
        super().__init__(max_seq_len, d_model, n_heads)
        self.slope = slope

    def bias(
        self,
        n_queries: int,
        n_keys: int,
        offset: int = 0,
        causal: bool = False,
        *,
        device: torch.device | str | None = None,
    ) -> Tensor:
        query = torch.arange(offset, offset + n_queries, device=device)[:, None]
        distance = (query - torch.arange(n_keys, device=device)).float()  # (T, S)
        bias = (-self.slope * distance.abs())[None]  # (1, T, S): every head
        return bias.masked_fill(distance < 0, -math.inf) if causal else bias


class NotAnEncoding:
    """A class that is no PositionalEncoding: naming it as one is refused before it is called."""

    def __init__(self, *args: object) -> None:
        raise AssertionError("never called")


class OlderContractBias(PositionalEncoding):
    """A bias written before `bias()` took `device=`: refused before any work starts."""

    def bias(self, n_queries, n_keys, offset=0, causal=False):
        return torch.zeros(1, n_queries, n_keys)


class BrokenAdd(PositionalEncoding):
    """An `add` that fails when called: refused before any work starts."""

    def add(self, x, offset):
        return x + torch.zeros(3)
