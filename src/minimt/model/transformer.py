"""Encoder-decoder Transformer (Vaswani et al., 2017), pre-LN and tied output layer by default."""

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from minimt.model.cache import DecoderCache, LayerCache
from minimt.model.embedding import Seq2SeqEmbedding
from minimt.model.positions import PositionalEncoding, PositionsFactory


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, S) ids -> (B, 1, 1, S) bool, True where the key is a real token (may be attended)."""
    return (ids != pad_id)[:, None, None, :]


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    *,
    is_causal: bool = False,
    dropout_p: float = 0.0,
) -> Tensor:
    """Scaled dot-product attention: q (B, h, T, d_k), k and v (B, h, S, d_k) -> (B, h, T, d_k).

    mask broadcasts to (B, h, T, S): boolean (True = may attend) or float (added to the logits,
    -inf = may not attend; ALiBi's), which is rounded here to q's dtype, as SDPA requires.
    """
    if mask is not None and mask.is_floating_point():
        mask = mask.to(q.dtype)
    # On CPU the math path trains faster than the flash kernel at these short lengths
    # (docs/performance.md); GPUs choose freely.
    backend = sdpa_kernel(SDPBackend.MATH) if q.device.type == "cpu" else nullcontext()
    with backend:
        return F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=is_causal
        )


class MultiHeadAttention(nn.Module):
    """Projects queries from x and keys/values from context, attends per head, projects back;
    a rotary encoding (self-attention only) turns queries and keys by their positions."""

    def __init__(
        self, d_model: int, n_heads: int, dropout: float, rotary: PositionalEncoding | None = None
    ):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.dropout = dropout
        self.rotary = rotary
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(
        self, x: Tensor, context: Tensor, mask: Tensor | None = None, is_causal: bool = False
    ) -> Tensor:
        """x (B, T, d_model), context (B, S, d_model) -> (B, T, d_model)."""
        k, v = self.keys_values(context)
        return self.attend(x, k, v, mask, is_causal=is_causal)

    def keys_values(self, context: Tensor, offset: int = 0) -> tuple[Tensor, Tensor]:
        """context (B, S, d_model) at positions offset.. -> keys and values, each (B, h, S, d_k)."""
        k = self._rotate(self._split_heads(self.k_proj(context)), offset)
        return k, self._split_heads(self.v_proj(context))

    def attend(
        self,
        x: Tensor,
        k: Tensor,
        v: Tensor,
        mask: Tensor | None = None,
        is_causal: bool = False,
        offset: int = 0,
    ) -> Tensor:
        """x (B, T, d_model) queries at positions offset.. against projected k, v (B, h, S, d_k)
        -> (B, T, d_model)."""
        q = self._rotate(self._split_heads(self.q_proj(x)), offset)  # (B, h, T, d_k)
        dropout_p = self.dropout if self.training else 0.0
        out = attention(q, k, v, mask, is_causal=is_causal, dropout_p=dropout_p)  # (B, h, T, d_k)
        return self.out_proj(out.transpose(1, 2).flatten(2))  # (B, T, d_model)

    def weights(self, x: Tensor, context: Tensor, mask: Tensor | None = None) -> Tensor:
        """forward's attention weights, masked keys at 0: x (B, T, d_model), context
        (B, S, d_model), boolean mask broadcasting to (B, h, T, S) -> (B, h, T, S)."""
        q = self._rotate(self._split_heads(self.q_proj(x)), 0)  # (B, h, T, d_k)
        k, _ = self.keys_values(context)  # (B, h, S, d_k)
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, h, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        return scores.softmax(dim=-1)

    def _split_heads(self, x: Tensor) -> Tensor:
        """(B, L, d_model) -> (B, h, L, d_k)."""
        return x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)

    def _rotate(self, x: Tensor, offset: int) -> Tensor:
        """(B, h, L, d_k) at positions offset.. -> rotated by RoPE, or unchanged without it."""
        return x if self.rotary is None else self.rotary.rotate(x, offset)


class FeedForward(nn.Module):
    """Position-wise FFN: max(0, x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.w1 = nn.Linear(d_model, d_ff)
        self.w2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        """(B, L, d_model) -> (B, L, d_model)."""
        return self.w2(F.relu(self.w1(x)))


class Residual(nn.Module):
    """Residual connection around a sublayer, with dropout and LayerNorm before or after it."""

    def __init__(self, d_model: int, dropout: float, norm_first: bool):
        super().__init__()
        self.norm = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def forward(self, x: Tensor, sublayer: Callable[[Tensor], Tensor]) -> Tensor:
        """(B, L, d_model) -> (B, L, d_model)."""
        if self.norm_first:
            return x + self.dropout(sublayer(self.norm(x)))
        return self.norm(x + self.dropout(sublayer(x)))


class EncoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        norm_first: bool,
        rotary: PositionalEncoding | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, rotary)
        self.ffn = FeedForward(d_model, d_ff)
        self.attn_residual = Residual(d_model, dropout, norm_first)
        self.ffn_residual = Residual(d_model, dropout, norm_first)

    def forward(self, x: Tensor, mask: Tensor) -> Tensor:
        """x (B, S, d_model), mask (B, 1, 1, S) padding mask, or (B, h, S, S) float with ALiBi's
        bias -> (B, S, d_model)."""
        x = self.attn_residual(x, lambda h: self.self_attn(h, h, mask))
        return self.ffn_residual(x, self.ffn)


class DecoderLayer(nn.Module):
    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        dropout: float,
        attention_dropout: float,
        norm_first: bool,
        rotary: PositionalEncoding | None = None,
    ):
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout, rotary)
        # Never rotated: source and target positions count along different sequences, so their
        # offset means nothing; cross-attention stays position-free under every encoding.
        self.cross_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.ffn = FeedForward(d_model, d_ff)
        self.self_attn_residual = Residual(d_model, dropout, norm_first)
        self.cross_attn_residual = Residual(d_model, dropout, norm_first)
        self.ffn_residual = Residual(d_model, dropout, norm_first)

    def forward(
        self, y: Tensor, memory: Tensor, src_mask: Tensor, self_mask: Tensor | None = None
    ) -> Tensor:
        """y (B, T, d_model), memory (B, S, d_model), src_mask (B, 1, 1, S) -> (B, T, d_model).

        No target padding mask: with right padding, causal attention never sees the pads.
        self_mask (h, T, T), ALiBi's causal float mask, replaces is_causal (SDPA takes one).
        """
        y = self.self_attn_residual(
            y, lambda h: self.self_attn(h, h, self_mask, is_causal=self_mask is None)
        )
        y = self.cross_attn_residual(y, lambda h: self.cross_attn(h, memory, src_mask))
        return self.ffn_residual(y, self.ffn)

    def step(
        self, y: Tensor, cache: LayerCache, src_mask: Tensor, self_mask: Tensor | None = None
    ) -> Tensor:
        """y (B * k, 1, d_model), each sentence's k rows at the next position (cache.length)
        -> (B * k, 1, d_model); writes its key and value into cache.

        No causal mask: the one query sees every cached key, and SDPA's is_causal aligns top-left
        when Lq != Lk. self_mask (h, 1, position + 1): ALiBi's bias row for this query.
        """
        position = cache.length

        def self_attention(h: Tensor) -> Tensor:
            cache.append(*self.self_attn.keys_values(h, position))  # (B * k, h, 1, d_k) each
            return self.self_attn.attend(h, cache.self_k, cache.self_v, self_mask, offset=position)

        def cross_attention(h: Tensor) -> Tensor:
            # A sentence's k rows query its keys/values together, as k positions of one query.
            q = h.view(cache.cross_k.size(0), -1, h.size(-1))  # (B, k, d_model)
            return self.cross_attn.attend(q, cache.cross_k, cache.cross_v, src_mask).view_as(h)

        y = self.self_attn_residual(y, self_attention)
        y = self.cross_attn_residual(y, cross_attention)
        return self.ffn_residual(y, self.ffn)


class Transformer(nn.Module):
    """Encoder-decoder Transformer whose output projection is the target embedding matrix
    (tie_output), or a matrix of its own. No argument has a default: configs/ holds them, and
    minimt.config.build_model is the one place a config becomes these arguments. src_positions
    and tgt_positions build each side's positional encoding: factory(max_seq_len, d_model,
    n_heads), a PositionalEncoding subclass or any callable of that shape."""

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        *,
        d_model: int,
        n_heads: int,
        n_encoder_layers: int,
        n_decoder_layers: int,
        d_ff: int,
        max_seq_len: int,
        dropout: float,
        attention_dropout: float,
        pad_id: int,
        norm_first: bool,
        tie_output: bool,
        src_positions: PositionsFactory,
        tgt_positions: PositionsFactory,
        scale_embedding: bool,
        share_embeddings: bool,
        init_std: float | None,
    ):
        super().__init__()
        self.pad_id = pad_id
        self.embedding = Seq2SeqEmbedding(
            src_vocab_size,
            tgt_vocab_size,
            d_model,
            max_seq_len=max_seq_len,
            dropout=dropout,
            src_padding_idx=pad_id,
            tgt_padding_idx=pad_id,
            scale_embedding=scale_embedding,
            share_embeddings=share_embeddings,
            src_positions=src_positions,
            tgt_positions=tgt_positions,
            init_std=init_std,
            n_heads=n_heads,
        )
        # Initialised as fairseq's untied output matrix.
        self.output_weight = None
        if not tie_output:
            self.output_weight = nn.Parameter(torch.empty(tgt_vocab_size, d_model))
            nn.init.normal_(self.output_weight, mean=0.0, std=d_model**-0.5)
        # A biasing encoding's mask is built once per forward and shared by its side's layers.
        src, tgt = self.embedding.src_positions, self.embedding.tgt_positions
        self.encoder_bias = src if src.biases else None
        self.decoder_bias = tgt if tgt.biases else None
        layer_args = (d_model, n_heads, d_ff, dropout, attention_dropout, norm_first)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(*layer_args, src if src.rotates else None) for _ in range(n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*layer_args, tgt if tgt.rotates else None) for _ in range(n_decoder_layers)
        )
        # Pre-LN leaves the residual stream unnormalised, so each stack ends with a LayerNorm.
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        # Embedding tables keep Seq2SeqEmbedding's init; only the layers' projections are set here.
        for module in self.modules():
            if isinstance(module, nn.Linear):
                nn.init.xavier_uniform_(module.weight)
                nn.init.zeros_(module.bias)

    @property
    def max_seq_len(self) -> int:
        """Longest source or target (including <bos>) the positional encoding accepts."""
        return self.embedding.max_seq_len

    def encode(self, src: Tensor) -> Tensor:
        """(B, S) source ids -> memory (B, S, d_model)."""
        mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        if self.encoder_bias is not None:
            bias = self.encoder_bias.bias(src.size(1), src.size(1), device=src.device)  # (h, S, S)
            mask = bias.masked_fill(~mask, -math.inf)  # (B, h, S, S)
        x = self.embedding.encode_source(src)  # (B, S, d_model)
        for layer in self.encoder_layers:
            x = layer(x, mask)
        return self.encoder_norm(x)

    def decode(self, tgt_in: Tensor, memory: Tensor, src: Tensor) -> Tensor:
        """(B, T) target ids, memory (B, S, d_model), (B, S) src (read for its padding mask only)
        -> hidden (B, T, d_model)."""
        src_mask = padding_mask(src, self.pad_id)  # (B, 1, 1, S)
        self_mask = None  # (h, T, T) with a bias; else causal through SDPA's is_causal
        if self.decoder_bias is not None:
            self_mask = self.decoder_bias.bias(
                tgt_in.size(1), tgt_in.size(1), causal=True, device=tgt_in.device
            )
        y = self.embedding.encode_target(tgt_in)  # (B, T, d_model)
        for layer in self.decoder_layers:
            y = layer(y, memory, src_mask, self_mask)
        return self.decoder_norm(y)

    def start_decoding(
        self, memory: Tensor, src: Tensor, capacity: int | None = None
    ) -> DecoderCache:
        """memory (B, S, d_model), (B, S) src -> an empty cache of one row per sentence, with
        cross-attention keys/values and room for `capacity` decode_step calls (None: max_seq_len).
        Call it and decode_step under one autocast setting, so cached and new keys share a dtype.
        """
        capacity = self.max_seq_len if capacity is None else capacity
        layers = []
        for layer in self.decoder_layers:
            # Contiguous, or every step's attention copies them to fold (B, h) into one dim.
            cross_k, cross_v = (t.contiguous() for t in layer.cross_attn.keys_values(memory))
            shape = (*cross_k.shape[:2], capacity, cross_k.size(-1))  # (B, h, capacity, d_k)
            layers.append(
                LayerCache(cross_k.new_empty(shape), cross_v.new_empty(shape), cross_k, cross_v)
            )
        return DecoderCache(layers, padding_mask(src, self.pad_id))

    def decode_step(self, tokens: Tensor, cache: DecoderCache) -> Tensor:
        """(N, 1) newest target ids of the cache's N = B * k rows -> hidden (N, 1, d_model), as
        decode(prefix + tokens, ...)[:, -1:] without recomputing the prefix; advances cache."""
        position = cache.position
        self_mask = None
        if self.decoder_bias is not None:
            self_mask = self.decoder_bias.bias(  # (h, 1, position + 1)
                1, position + 1, offset=position, device=tokens.device
            )
        y = self.embedding.encode_target(tokens, offset=position)  # (N, 1, d_model)
        for layer, layer_cache in zip(self.decoder_layers, cache.layers, strict=True):
            y = layer.step(y, layer_cache, cache.src_mask, self_mask)
        return self.decoder_norm(y)

    @property
    def output_matrix(self) -> Tensor:
        """(tgt_vocab, d_model): the output projection, the target table itself when tied."""
        return self.embedding.tgt_token_weight if self.output_weight is None else self.output_weight

    def project(self, hidden: Tensor) -> Tensor:
        """(B, T, d_model) -> logits (B, T, tgt_vocab), through the output matrix."""
        return F.linear(hidden, self.output_matrix)

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """(B, S) src, (B, T) tgt_in -> logits (B, T, tgt_vocab)."""
        return self.project(self.decode(tgt_in, self.encode(src), src))

    def num_parameters(self) -> int:
        """Trainable and frozen parameters, a shared matrix counted once."""
        return sum(p.numel() for p in self.parameters())
