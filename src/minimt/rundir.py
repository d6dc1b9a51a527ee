"""A self-describing run directory: its config, tokenizer and checkpoints rebuild the model."""

from __future__ import annotations

from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import latest_checkpoint, load_checkpoint, load_weights
from minimt.model import Transformer
from minimt.tokenizer import PAD_ID, TokenizerPair

NAMED_CHECKPOINTS = ("best", "last", "averaged")


def pick_device(name: str) -> torch.device:
    """ "auto" is cuda when available, else cpu; asking for a missing cuda is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device cuda asked for, but no CUDA device is available; use cpu")
    return torch.device(name)


def bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_precision(precision: str, device: torch.device) -> str:
    """ "auto" becomes bf16 where the device has fast bf16 matrix units, else fp32."""
    if precision == "auto":
        return "bf16" if bf16_supported(device) else "fp32"
    return precision


def precision_autocast(precision: str, device: torch.device) -> torch.autocast:
    """bf16 autocast on `device` for precision "bf16"; a disabled one (fp32) otherwise."""
    return torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16")


def build_model(cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    """The model a config describes; the one place where config becomes a model."""
    m = cfg.model
    return Transformer(
        src_vocab_size,
        tgt_vocab_size,
        d_model=m.d_model,
        n_heads=m.n_heads,
        n_encoder_layers=m.n_encoder_layers,
        n_decoder_layers=m.n_decoder_layers,
        d_ff=m.d_ff,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        max_seq_len=m.max_seq_len,
        pad_id=PAD_ID,
        pos_encoding=cfg.pe.name,
        scale_embedding=cfg.embedding.scale,
        share_embeddings=cfg.embedding.share,
        norm_first=m.norm_first,
    )


def checkpoint_path(run_dir: str | Path, checkpoint: str) -> Path:
    """best / averaged name a file in run_dir/checkpoints, last the newest step_<N>.pt there;
    anything else is a path."""
    if checkpoint == "last":
        return latest_checkpoint(Path(run_dir) / "checkpoints")
    if checkpoint in NAMED_CHECKPOINTS:
        path = Path(run_dir) / "checkpoints" / f"{checkpoint}.pt"
        if checkpoint == "averaged" and not path.is_file():
            raise FileNotFoundError(
                f"no averaged checkpoint at {path}: run "
                f"`python scripts/average_checkpoints.py run={run_dir}` first"
            )
        return path
    return Path(checkpoint)


def load_model(
    run_dir: str | Path, checkpoint: str = "best"
) -> tuple[Transformer, TokenizerPair, DictConfig]:
    """Rebuild a trained model (in eval mode, on the CPU), its tokenizers and its config."""
    path = checkpoint_path(run_dir, checkpoint)
    saved = load_checkpoint(path)
    tokenizers = TokenizerPair.load(run_dir)
    cfg = OmegaConf.create(saved["config"])
    model = build_model(cfg, tokenizers.src_vocab_size, tokenizers.tgt_vocab_size)
    load_weights(model, saved["model"], path)
    return model.eval(), tokenizers, cfg
