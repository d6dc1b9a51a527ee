"""`key=value` command lines for the scripts that use a run directory (lists as [a,b])."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError


def parse_args(defaults: dict, argv: Sequence[str], usage: str) -> DictConfig:
    """Merge `key=value` arguments over `defaults`; unknown or missing keys exit with usage."""
    if any(arg in ("-h", "--help") for arg in argv):
        sys.exit(usage)
    cfg = OmegaConf.create(defaults)
    OmegaConf.set_struct(cfg, True)
    try:
        cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist(list(argv)))
    except ConfigKeyError as error:
        sys.exit(f"error: unknown argument ({error.msg.splitlines()[0]})\n{usage}")
    except ValueError as error:
        sys.exit(f"error: arguments are key=value ({error})\n{usage}")
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        sys.exit(f"error: {', '.join(missing)} must be given\n{usage}")
    return cfg


def setup_logging() -> None:
    """Log lines go to stderr, so stdout carries only the scripts' own output."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # a line per event file read
