"""What the scripts share: `key=value` command lines (lists as [a,b]), logging to stderr, user
errors and interruptions (Ctrl-C, SIGTERM) ending a script as one line, a reader of its output
that quit ending it silently, and a markdown finding written and shown."""

from __future__ import annotations

import functools
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, ConfigTypeError

from minimt.atomic import WriteError, write_text
from minimt.errors import MinimtError, with_hint
from minimt.signals import Terminated, interrupted_line, stop_signals_raise

# Hydra's switch for train.py's full traceback; every script reads the same one.
FULL_ERROR = "HYDRA_FULL_ERROR"


def parse_args(
    defaults: dict, argv: Sequence[str], usage: str, rules: dict | None = None
) -> DictConfig:
    """Merge `key=value` arguments over `defaults`; unknown or missing keys exit with usage, a
    value its rule (minimt.config's) refuses with one line naming it. `-h`/`--help` prints
    `usage` to stdout and exits 0."""
    if any(arg in ("-h", "--help") for arg in argv):
        print(usage)
        sys.exit(0)
    cfg = OmegaConf.create(defaults)
    OmegaConf.set_struct(cfg, True)
    for arg in argv:
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.from_dotlist([arg]))
        except ConfigKeyError as error:
            sys.exit(f"error: unknown argument ({error.msg.splitlines()[0]})\n{usage}")
        except (ValueError, ConfigTypeError, yaml.YAMLError) as error:
            sys.exit(f"error: {arg}: arguments are key=value ({str(error).splitlines()[0]})")
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        sys.exit(f"error: {', '.join(missing)} must be given\n{usage}")
    problems = [f"{k}={cfg[k]!r} {why}" for k, r in (rules or {}).items() if (why := r(cfg[k]))]
    if problems:
        sys.exit(f"error: {'; '.join(problems)}")
    return cfg


def setup_logging() -> None:
    """Log lines go to stderr, so stdout carries only the scripts' own output."""
    logging.basicConfig(
        stream=sys.stderr, level=logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("tensorboard").setLevel(logging.WARNING)  # a line per event file read


def one_line_errors(main: Callable) -> Callable:
    """Decorate a script's main: a MinimtError ends it with `error: <message>` as one line on
    stderr and exit status 1, no traceback; SIGINT (Ctrl-C) or SIGTERM ends it with one
    `interrupted` line and exit status 128 + the signal's number (130, 143), after the temp files
    of unfinished writes are removed; a reader of stdout that quit (`| head`, `less` closed) ends
    it silently with 141, as SIGPIPE ends a shell tool. HYDRA_FULL_ERROR=1 raises each with its
    traceback.

    Under @hydra.main, put it below: Hydra then never sees the error (nor prints its trace).
    """

    @functools.wraps(main)
    def reporting(*args, **kwargs):
        try:
            with stop_signals_raise():
                result = main(*args, **kwargs)
                sys.stdout.flush()  # a closed pipe fails here, not at exit
                return result
        except MinimtError as error:
            if os.environ.get(FULL_ERROR) == "1":
                raise
            sys.exit(f"error: {one_line(str(error))}")
        except (KeyboardInterrupt, Terminated) as stop:
            if os.environ.get(FULL_ERROR) == "1":
                raise
            signum = signal.SIGINT if isinstance(stop, KeyboardInterrupt) else signal.SIGTERM
            print(interrupted_line(signum), file=sys.stderr)
            sys.exit(128 + signum)
        except BrokenPipeError:
            if os.environ.get(FULL_ERROR) == "1":
                raise
            stdout_to_devnull()
            sys.exit(128 + signal.SIGPIPE)

    return reporting


def stdout_to_devnull() -> None:
    """Point stdout's file descriptor at os.devnull, so that the output still buffered for a pipe
    whose reader quit goes nowhere at exit instead of failing again (Python's signal docs, note
    on SIGPIPE)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def one_line(message: str) -> str:
    """A message's indented lines (`header:\n  item\n  item`) as `header: item; item`."""
    header, *items = [line.strip() for line in message.splitlines() if line.strip()] or [""]
    return " ".join([header, "; ".join(items)]) if items else header


def publish(text: str, out: Path) -> None:
    """Write `text` to `out` whole or not at all, then print it and where it went."""
    with with_hint(f"{out} is its previous version or none", WriteError):
        write_text(out, text)
    print(text)
    print(f"wrote {out}")
