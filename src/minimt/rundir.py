"""A self-describing run directory: its config, tokenizer and checkpoints rebuild the model."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import (
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    step_checkpoints,
)
from minimt.config import ConfigError, build_model, resume_mismatches
from minimt.data.tokenizer import TokenizerPair
from minimt.model.transformer import Transformer

NAMED_CHECKPOINTS = ("best", "last", "averaged")


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


def finished_run(run_dir: str | Path, cfg: DictConfig) -> dict | None:
    """The metrics.json of a run that already finished in run_dir with cfg's settings (a sweep
    run again skips it), None if none finished there."""
    path = Path(run_dir) / "metrics.json"
    if not path.is_file():
        return None
    metrics = json.loads(path.read_text())
    problems = resume_mismatches(metrics["config"], cfg)
    if problems:
        raise ConfigError(
            f"{run_dir} holds a finished run with other settings, so it cannot stand for this "
            "one: give the sweep another directory (hydra.sweep.dir=...) or the run another "
            "(hydra.run.dir=...):\n  " + "\n  ".join(problems)
        )
    return metrics


def interrupted_run(run_dir: str | Path) -> bool:
    """run_dir holds step checkpoints but no metrics.json: a run stopped before its end."""
    run_dir = Path(run_dir)
    return not (run_dir / "metrics.json").is_file() and bool(
        step_checkpoints(run_dir / "checkpoints")
    )
