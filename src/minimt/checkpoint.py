"""Checkpoints and run files written atomically, and loaded without executing code."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

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
