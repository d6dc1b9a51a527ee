"""Checkpoints and run files written atomically, and loaded without executing code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from minimt.atomic import atomic_write


def save_json(path: str | Path, data: dict) -> None:
    with atomic_write(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2) + "\n")


def save_checkpoint(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Save tensors, numbers, strings and containers of them (what weights_only loading accepts)."""
    with atomic_write(path) as tmp:
        torch.save(checkpoint, tmp)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint onto the CPU; `weights_only=True` refuses anything that would run code."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    return torch.load(path, map_location="cpu", weights_only=True)


def step_checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """The numbered checkpoints step_<N>.pt in `ckpt_dir`, oldest first."""
    return sorted(Path(ckpt_dir).glob("step_*.pt"), key=lambda p: int(p.stem.split("_")[1]))


def remove_old_checkpoints(ckpt_dir: str | Path, keep: int) -> None:
    """Delete all but the newest `keep` numbered checkpoints (the newest is never deleted)."""
    for path in step_checkpoints(ckpt_dir)[: -max(keep, 1)]:
        path.unlink()


def average_state_dicts(state_dicts: list[dict[str, Tensor]]) -> dict[str, Tensor]:
    """Element-wise mean of floating-point tensors (others taken from the last state dict).

    A tied matrix appears under several keys of one state dict; each key gets the same average,
    and load_state_dict copies it into the model's single shared Parameter, so tying is kept.
    """
    if not state_dicts:
        raise ValueError("no checkpoints to average")
    averaged = {}
    for key, last in state_dicts[-1].items():
        if last.is_floating_point():
            stacked = torch.stack([sd[key].double() for sd in state_dicts])
            averaged[key] = stacked.mean(dim=0).to(last.dtype)
        else:
            averaged[key] = last
    return averaged


def average_last_checkpoints(ckpt_dir: str | Path, last: int) -> Path:
    """Average the newest `last` step_<N>.pt into averaged.pt (config and state of the newest)."""
    paths = step_checkpoints(ckpt_dir)[-last:]
    if not paths:
        raise FileNotFoundError(f"no numbered checkpoints (step_<N>.pt) in {ckpt_dir}")
    checkpoints = [load_checkpoint(p) for p in paths]
    averaged = {
        **checkpoints[-1],
        "model": average_state_dicts([c["model"] for c in checkpoints]),
        "averaged_from": [p.name for p in paths],
    }
    out = Path(ckpt_dir) / "averaged.pt"
    save_checkpoint(out, averaged)
    return out
