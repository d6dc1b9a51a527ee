"""A self-describing run directory: its config, tokenizer and checkpoints rebuild the model."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import (
    DamagedCheckpoint,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    loads,
    step_checkpoints,
)
from minimt.config import ConfigError, build_model, resume_mismatches
from minimt.data.tokenizer import TokenizerPair
from minimt.errors import NotFound
from minimt.model.transformer import Transformer

NAMED_CHECKPOINTS = ("best", "last", "averaged")


def checkpoint_dir(run_dir: str | Path) -> Path:
    """run_dir/checkpoints, or NotFound saying that run_dir is no run directory."""
    run_dir = Path(run_dir)
    if not (run_dir / "checkpoints").is_dir():
        raise NotFound(
            f"no run directory at {run_dir}: expected {run_dir / '.hydra' / 'config.yaml'} and "
            f"{run_dir / 'checkpoints'}/ (give the directory a training run wrote, e.g. "
            "outputs/2026-11-21/10-00-00)"
        )
    return run_dir / "checkpoints"


def checkpoint_path(run_dir: str | Path, checkpoint: str) -> Path:
    """best / averaged name a file in run_dir/checkpoints, last the newest step_<N>.pt there,
    a file name there (step_800.pt) that file; anything else is a path."""
    ckpt_dir = checkpoint_dir(run_dir)
    if checkpoint == "last":
        return latest_checkpoint(ckpt_dir)
    if checkpoint in NAMED_CHECKPOINTS:
        path = ckpt_dir / f"{checkpoint}.pt"
        if checkpoint == "averaged" and not path.is_file():
            raise NotFound(
                f"no averaged checkpoint at {path}: run "
                f"`python scripts/average_checkpoints.py run={run_dir}` first"
            )
        return path
    in_run = ckpt_dir / checkpoint
    return in_run if in_run.is_file() else Path(checkpoint)


def load_model(
    run_dir: str | Path, checkpoint: str = "best"
) -> tuple[Transformer, TokenizerPair, DictConfig]:
    """Rebuild a trained model (in eval mode, on the CPU), its tokenizers and its config.

    A missing or damaged checkpoint is an error naming the run's checkpoints that load instead.
    """
    path = checkpoint_path(run_dir, checkpoint)
    try:
        saved = load_checkpoint(path)
    except (NotFound, DamagedCheckpoint) as error:
        raise type(error)(f"{error}; {checkpoints_that_load(run_dir, path)}") from error
    tokenizers = TokenizerPair.load(run_dir)
    cfg = OmegaConf.create(saved["config"])
    model = build_model(cfg, tokenizers.src_vocab_size, tokenizers.tgt_vocab_size)
    load_weights(model, saved["model"], path)
    return model.eval(), tokenizers, cfg


def checkpoints_that_load(run_dir: str | Path, other_than: Path) -> str:
    """The `checkpoint=` arguments of run_dir's checkpoints (but `other_than`) that load."""
    ckpt_dir = checkpoint_dir(run_dir)
    steps = step_checkpoints(ckpt_dir)
    names = {ckpt_dir / "best.pt": "best", ckpt_dir / "averaged.pt": "averaged"}
    if steps:
        names[steps[-1]] = f"last ({steps[-1].name})"
    candidates = [*names, *reversed(steps[:-1])]
    usable = [
        f"checkpoint={names.get(path, path.name)}"
        for path in candidates
        if path != other_than and path.is_file() and loads(path)
    ]
    if not usable:
        return f"no other checkpoint in {ckpt_dir} loads (train the run again)"
    return f"these load: {', '.join(usable)}"


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
