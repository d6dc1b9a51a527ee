"""What the scripts share: `key=value` command lines (lists as [a,b]), logging to stderr, and
user errors ending a script as one line."""

from __future__ import annotations

import functools
import logging
import os
import sys
from collections.abc import Callable, Sequence

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError

from minimt.errors import MinimtError

# Hydra's switch for train.py's full traceback; every script reads the same one.
FULL_ERROR = "HYDRA_FULL_ERROR"


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


def one_line_errors(main: Callable) -> Callable:
    """Decorate a script's main: a MinimtError ends it with `error: <message>` as one line on
    stderr and exit status 1, no traceback; HYDRA_FULL_ERROR=1 raises it with its traceback.

    Under @hydra.main, put it below: Hydra then never sees the error (nor prints its trace).
    """

    @functools.wraps(main)
    def reporting(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except MinimtError as error:
            if os.environ.get(FULL_ERROR) == "1":
                raise
            sys.exit(f"error: {one_line(str(error))}")

    return reporting


def one_line(message: str) -> str:
    """A message's indented lines (`header:\n  item\n  item`) as `header: item; item`."""
    header, *items = [line.strip() for line in message.splitlines() if line.strip()] or [""]
    return " ".join([header, "; ".join(items)]) if items else header
