"""A run's model as a CTranslate2 model directory (docs/export.md): every built-in encoding on
either side, pre- or post-LN, each tying level, sqrt(d_model) scaling on or off.

CTranslate2 is an optional dependency (pip install -e ".[export]"). What it cannot express (an
encoding of your own) is an ExportError naming it. The traps the mapping avoids: CTranslate2
adds its own, different sinusoid where a side has no table (so `none` gets a table of zeros);
its rotary layout defaults to interleaved pairs (minimt's is half-split); encoder ALiBi has no
switch of its own and is written as a T5 relative-attention bias with one bucket per distance;
int8 quantization scales arrays in place, so every array is a copy of the model's."""

from __future__ import annotations

import importlib
import json
import shutil
import tempfile
from pathlib import Path
from types import ModuleType

import numpy as np
import torch
from torch import Tensor, nn

from minimt import __version__
from minimt.data.tokenizer import SPECIAL_TOKENS, TokenizerPair
from minimt.errors import MinimtError
from minimt.migrations import RUN_FORMAT
from minimt.model.positions import (
    AlibiBias,
    LearnedPositions,
    NoPositions,
    PositionalEncoding,
    RotaryPositions,
    SinusoidalPositions,
)
from minimt.model.transformer import MultiHeadAttention, Transformer
from minimt.provenance import source_commit, utc_now
from minimt.rundir import checkpoint_path, load_model

PAD, UNK, BOS, EOS = SPECIAL_TOKENS
QUANTIZATIONS = ("float32", "int8")
RECORD = "minimt_export.json"  # what was exported, beside CTranslate2's files
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which minimt keeps
DECODING_KEYS = ("max_len_a", "max_len_b", "test_beam", "length_penalty")  # the run's, recorded
EXPORTABLE = (SinusoidalPositions, LearnedPositions, NoPositions, RotaryPositions, AlibiBias)


class ExportError(MinimtError):
    """A model, a run or a setting CTranslate2 cannot take; the message names it."""


def ctranslate2() -> ModuleType:
    """The ctranslate2 package, or an ExportError saying how to install it."""
    try:
        return importlib.import_module("ctranslate2")
    except ImportError as error:
        raise ExportError(
            'exporting needs CTranslate2: pip install -e ".[export]" (ctranslate2 4.8)'
        ) from error


def array(tensor: Tensor) -> np.ndarray:
    """A float32 copy: CTranslate2's int8 quantization scales its arrays in place."""
    return tensor.detach().to(torch.float32).cpu().numpy().copy()


def check_exportable(model: Transformer) -> None:
    sides = {"source": model.embedding.src_positions, "target": model.embedding.tgt_positions}
    for side, positions in sides.items():
        if type(positions) not in EXPORTABLE:
            name = f"{type(positions).__module__}.{type(positions).__qualname__}"
            raise ExportError(
                f"the {side} side's positional encoding {name} has no CTranslate2 equivalent: "
                "only the built-in encodings (sinusoidal, learned, none, rope, alibi) export"
            )


def model_spec(model: Transformer, tokenizers: TokenizerPair):
    """The CTranslate2 TransformerSpec of `model` (its weights copied) and its vocabularies."""
    check_exportable(model)
    specs = ctranslate2().specs
    src, tgt = model.embedding.src_positions, model.embedding.tgt_positions
    pre_norm = isinstance(model.encoder_norm, nn.LayerNorm)
    n_heads = model.encoder_layers[0].self_attn.n_heads
    rotary = {"rotary_dim": 0, "rotary_interleave": False}  # all dims, half-split pairs
    encoder = specs.TransformerEncoderSpec(
        len(model.encoder_layers),
        n_heads,
        pre_norm=pre_norm,
        relative_attention_bias=isinstance(src, AlibiBias),
        **(rotary if isinstance(src, RotaryPositions) else {}),
    )
    decoder = specs.TransformerDecoderSpec(
        len(model.decoder_layers),
        n_heads,
        pre_norm=pre_norm,
        alibi=isinstance(tgt, AlibiBias),
        alibi_use_positive_positions=False,
        scale_alibi=False,
        **(rotary if isinstance(tgt, RotaryPositions) else {}),
    )
    spec = specs.TransformerSpec(encoder, decoder)
    fill_encoder(spec.encoder, model)
    fill_decoder(spec.decoder, model)
    spec.register_source_vocabulary(vocabulary(tokenizers.src))
    spec.register_target_vocabulary(vocabulary(tokenizers.tgt))
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = UNK, BOS, EOS
    config.decoder_start_token, config.add_source_bos, config.add_source_eos = BOS, False, True
    config.layer_norm_epsilon = LAYER_NORM_EPSILON
    return spec


def fill_encoder(spec, model: Transformer) -> None:
    embedding, positions = model.embedding, model.embedding.src_positions
    spec.embeddings[0].weight = array(embedding.src_tokens.weight)
    spec.scale_embeddings = embedding.scale != 1.0
    set_positions(spec, positions, model.max_seq_len, embedding.d_model)
    for layer_spec, layer in zip(spec.layer, model.encoder_layers, strict=True):
        set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        set_layer_norm(layer_spec.self_attention.layer_norm, layer.attn_residual.norm)
        set_feed_forward(layer_spec.ffn, layer)
        if isinstance(positions, AlibiBias):
            set_alibi_buckets(layer_spec.self_attention, positions, model.max_seq_len)
    if isinstance(model.encoder_norm, nn.LayerNorm):
        set_layer_norm(spec.layer_norm, model.encoder_norm)


def fill_decoder(spec, model: Transformer) -> None:
    embedding, positions = model.embedding, model.embedding.tgt_positions
    spec.embeddings.weight = array(embedding.tgt_token_weight)
    spec.scale_embeddings = embedding.scale != 1.0
    set_positions(spec, positions, model.max_seq_len, embedding.d_model)
    for layer_spec, layer in zip(spec.layer, model.decoder_layers, strict=True):
        set_attention(layer_spec.self_attention, layer.self_attn, self_attention=True)
        set_layer_norm(layer_spec.self_attention.layer_norm, layer.self_attn_residual.norm)
        set_attention(layer_spec.attention, layer.cross_attn, self_attention=False)
        set_layer_norm(layer_spec.attention.layer_norm, layer.cross_attn_residual.norm)
        set_feed_forward(layer_spec.ffn, layer)
    if isinstance(model.decoder_norm, nn.LayerNorm):
        set_layer_norm(spec.layer_norm, model.decoder_norm)
    spec.projection.weight = array(model.output_matrix)


def set_positions(spec, positions: PositionalEncoding, max_seq_len: int, d_model: int) -> None:
    """An additive encoding's table, rows 0..max_seq_len-1; zeros for none, which CTranslate2
    would otherwise fill with its own sinusoid. RoPE and ALiBi add nothing."""
    if isinstance(positions, SinusoidalPositions):
        spec.position_encodings.encodings = array(positions.table[:max_seq_len])
    elif isinstance(positions, LearnedPositions):
        spec.position_encodings.encodings = array(positions.table.weight)
    elif isinstance(positions, NoPositions):
        spec.position_encodings.encodings = np.zeros((max_seq_len, d_model), np.float32)


def set_alibi_buckets(spec, alibi: AlibiBias, max_seq_len: int) -> None:
    """Encoder ALiBi as a T5 relative-attention bias: with 4 * max_seq_len buckets every
    distance |i - j| < max_seq_len has its own, d for a key at or before the query and
    2 * max_seq_len + d for one after; each holds -m_h * d."""
    buckets = 4 * max_seq_len
    distance = torch.arange(max_seq_len, dtype=torch.float32)
    per_head = -alibi.slopes.float()[None, :] * distance[:, None]  # (max_seq_len, h)
    table = torch.zeros(buckets, per_head.size(1))
    table[:max_seq_len] = per_head
    table[2 * max_seq_len : 3 * max_seq_len] = per_head
    spec.relative_attention_bias = array(table)
    spec.relative_attention_max_distance = np.dtype("int32").type(buckets)


def set_attention(spec, attention: MultiHeadAttention, self_attention: bool) -> None:
    """Self-attention: linear[0] the fused q|k|v, linear[1] out; cross-attention: linear[0] q,
    linear[1] the fused k|v, linear[2] out."""
    q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
    groups = [(q, k, v)] if self_attention else [(q,), (k, v)]
    for linear_spec, group in zip(spec.linear, groups, strict=False):
        linear_spec.weight = array(torch.cat([linear.weight for linear in group]))
        linear_spec.bias = array(torch.cat([linear.bias for linear in group]))
    set_linear(spec.linear[-1], attention.out_proj)


def set_feed_forward(spec, layer: nn.Module) -> None:
    set_layer_norm(spec.layer_norm, layer.ffn_residual.norm)
    set_linear(spec.linear_0, layer.ffn.w1)
    set_linear(spec.linear_1, layer.ffn.w2)


def set_linear(spec, linear: nn.Linear) -> None:
    spec.weight = array(linear.weight)
    spec.bias = array(linear.bias)


def set_layer_norm(spec, norm: nn.LayerNorm) -> None:
    spec.gamma = array(norm.weight)
    spec.beta = array(norm.bias)


def vocabulary(tokenizer) -> list[str]:
    """The tokenizer's tokens in id order (CTranslate2 maps tokens by string)."""
    by_id = sorted(tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: item[1])
    tokens = [token for token, _ in by_id]
    if [i for _, i in by_id] != list(range(len(tokens))) or len(set(tokens)) != len(tokens):
        raise ExportError("the tokenizer's ids are not one token each from 0: it cannot export")
    return tokens


def save_model(
    model: Transformer, tokenizers: TokenizerPair, out: Path, quantization: str, record: dict
) -> Path:
    """Write the CTranslate2 model directory `out` whole or not at all: built in a folder beside
    it, then renamed into place (an existing `out` is replaced only once the new one is whole)."""
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization={quantization}: use one of {', '.join(QUANTIZATIONS)}")
    converters = importlib.import_module("ctranslate2.converters")

    class ModelConverter(converters.Converter):
        def _load(self):
            return model_spec(model, tokenizers)

    out.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        model_dir = building / "model"
        ModelConverter().convert(str(model_dir), quantization=quantization)
        tokenizers.save(model_dir)
        (model_dir / RECORD).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
        if out.exists():
            out.rename(building / "replaced")
        model_dir.rename(out)
    finally:
        shutil.rmtree(building, ignore_errors=True)
    return out


def export_run(
    run_dir: str | Path,
    out: str | Path,
    checkpoint: str = "best",
    quantization: str = "float32",
    overwrite: bool = False,
) -> Path:
    """Export a run's checkpoint (any run format: it loads through the migrations) with its
    tokenizers and a record of what was exported (RECORD) to the folder `out`, which must be new
    or empty unless `overwrite`."""
    out = Path(out)
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not overwrite):
        raise ExportError(
            f"out={out} exists and is not an empty folder: name a new one, or pass "
            "overwrite=true to replace it"
        )
    model, tokenizers, cfg = load_model(run_dir, checkpoint)
    decoding = {key: cfg.decoding[key] for key in DECODING_KEYS}
    record = {
        "run": str(Path(run_dir).resolve()),
        "checkpoint": str(checkpoint_path(run_dir, checkpoint).resolve()),
        "run_format": RUN_FORMAT,
        "tokenizer_digest": tokenizers.fingerprint,
        "quantization": quantization,
        "decoding": decoding | {"max_seq_len": model.max_seq_len},
        "minimt": __version__,
        "commit": source_commit(),
        "ctranslate2": ctranslate2().__version__,
        "exported_utc": utc_now(),
    }
    return save_model(model, tokenizers, out, quantization, record)
