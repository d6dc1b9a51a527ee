"""Shared test helpers: compose the real Hydra config."""

from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

REPO = Path(__file__).resolve().parents[1]


def compose_config(*overrides: str) -> DictConfig:
    """The config `scripts/train.py` would see with these command-line overrides."""
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides))
