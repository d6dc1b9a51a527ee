"""A self-describing run directory: its config, tokenizer and checkpoints rebuild the model."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import (
    CheckpointMismatch,
    DamagedCheckpoint,
    is_loadable,
    latest_checkpoint,
    load_checkpoint,
    load_weights,
    save_json,
    step_checkpoints,
)
from minimt.config import ConfigError, build_model, resume_mismatches
from minimt.data.tokenizer import JOINT_FILE, SRC_FILE, TGT_FILE, TokenizerPair
from minimt.errors import MinimtError, NotFound, with_hint
from minimt.locks import writing
from minimt.migrations import FINISHED_KEY, upgraded_metrics
from minimt.model.transformer import Transformer

NAMED_CHECKPOINTS = ("best", "last", "averaged")


class DamagedRecord(MinimtError):
    """A run's metrics.json that is not the JSON training wrote (cut short, edited, overwritten)."""


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
    with with_hint(lambda: checkpoints_that_load(run_dir, path), NotFound, DamagedCheckpoint):
        saved = load_checkpoint(path)
    tokenizers = TokenizerPair.load(run_dir)
    check_tokenizers(tokenizers, saved, path)
    cfg = OmegaConf.create(saved["config"])
    model = build_model(cfg, tokenizers.src_vocab_size, tokenizers.tgt_vocab_size)
    load_weights(model, saved["model"], path)
    return model.eval(), tokenizers, cfg


def check_tokenizers(tokenizers: TokenizerPair, saved: dict, checkpoint: Path) -> None:
    """The tokenizers beside `checkpoint` must be the ones it trained with: another vocabulary
    size is an error that gives both sizes, other contents one that says so."""
    run_dir = checkpoint.parent.parent
    named = " and ".join(str(path) for path in tokenizer_files(run_dir))
    sides = {"source": tokenizers.src_vocab_size, "target": tokenizers.tgt_vocab_size}
    for (side, size), key in zip(sides.items(), ("src", "tgt"), strict=True):
        trained = len(saved["model"].get(f"embedding.{key}_tokens.weight", ()))
        if trained not in (0, size):
            raise CheckpointMismatch(
                f"{named} and {checkpoint} come from different runs: the tokenizer has a {side} "
                f"vocabulary of {size} tokens, the checkpoint was trained with {trained}; copy "
                "the tokenizer of the run that wrote the checkpoint"
            )
    recorded = saved.get("state", {}).get("tokenizer_digest")
    if recorded and recorded != tokenizer_digest(run_dir):
        raise CheckpointMismatch(
            f"{named} is not the tokenizer {checkpoint} trained with (same vocabulary size, other "
            "contents: edited or from another run); copy the one of the run that wrote it"
        )


def keep_tokenizers(run_dir: Path, tokenizers: TokenizerPair) -> None:
    """Save a run's `tokenizers` into run_dir; where it already holds checkpoints, the tokenizer
    files they trained with are never written again: these must be the same."""
    if not any((run_dir / "checkpoints").glob("*.pt")):
        tokenizers.save(run_dir)
        return
    try:
        there = TokenizerPair.load(run_dir)
    except NotFound:
        tokenizers.save(run_dir)
        return
    if there.fingerprint != tokenizers.fingerprint:
        named = " and ".join(str(path) for path in tokenizer_files(run_dir))
        raise CheckpointMismatch(
            f"{run_dir} holds checkpoints trained with {named}, and this run's data make "
            "another tokenizer (other training files or tokenizer settings): train in another "
            f"directory, or continue that run with resume={run_dir}"
        )


def tokenizer_files(run_dir: Path) -> list[Path]:
    joint = run_dir / JOINT_FILE
    return [joint] if joint.is_file() else [run_dir / SRC_FILE, run_dir / TGT_FILE]


def tokenizer_digest(run_dir: Path) -> str:
    """SHA-256 of the tokenizer file(s) in `run_dir` as saved: a checkpoint records it."""
    return hashlib.sha256(b"".join(p.read_bytes() for p in tokenizer_files(run_dir))).hexdigest()


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
        if path != other_than and path.is_file() and is_loadable(path)
    ]
    if not usable:
        return f"no other checkpoint in {ckpt_dir} loads (train the run again)"
    return f"these load: {', '.join(usable)}"


def read_metrics(run_dir: str | Path) -> dict | None:
    """run_dir/metrics.json (training's record and evaluate.py's entries), None if there is
    none."""
    path = Path(run_dir) / "metrics.json"
    if not path.exists():
        return None
    try:
        metrics = json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DamagedRecord(
            f"{path} is damaged (not the JSON training wrote: {error}); restore it from a copy, "
            "or move it away (its run's checkpoints are untouched)"
        ) from error
    if not isinstance(metrics, dict):
        raise DamagedRecord(f"{path} holds no JSON object; restore it from a copy or move it away")
    return metrics


def update_metrics(run_dir: str | Path, change: Callable[[dict], dict]) -> dict:
    """Write run_dir/metrics.json as change(what it holds now) ({} where there is none): read
    and written while this command holds the run (minimt.locks), never from a copy read
    earlier, so that what other commands added stays. Returns what was written."""
    with writing(run_dir):
        metrics = change(read_metrics(run_dir) or {})
        save_json(Path(run_dir) / "metrics.json", metrics)
    return metrics


def is_finished(run_dir: str | Path) -> bool:
    """Whether training's end recorded run_dir's run as finished (evaluate.py's entries alone,
    of a run stopped part-way, do not finish it)."""
    return bool(finished_record(read_metrics(run_dir)))


def reopen(run_dir: str | Path) -> None:
    """A finished run trained further (resumed with a larger budget) is finished again only by
    this training's end: until then its record says `"finished": false`, so that a stop part-way
    leaves an interrupted run, which the training command run again resumes, not skips."""
    if is_finished(run_dir):
        update_metrics(run_dir, lambda metrics: metrics | {FINISHED_KEY: False})


def finished_record(metrics: dict | None) -> dict | None:
    """A metrics.json record in today's format if training finished it, else None."""
    record = upgraded_metrics(metrics) if metrics is not None else None
    return record if record and record[FINISHED_KEY] else None


def finished_run(run_dir: str | Path, cfg: DictConfig) -> dict | None:
    """The metrics.json of a run finished in run_dir with cfg's settings (a sweep skips it)."""
    metrics = read_metrics(run_dir)
    record = finished_record(metrics)
    if record is None:
        return None
    problems = resume_mismatches(record.get("config", {}), cfg)
    if problems:
        raise ConfigError(
            f"{run_dir} holds a finished run with other settings, so it cannot stand for this "
            "one: give the sweep another directory (hydra.sweep.dir=...) or the run another "
            "(hydra.run.dir=...):\n  " + "\n  ".join(problems)
        )
    return metrics


def interrupted_run(run_dir: str | Path) -> bool:
    """run_dir holds step checkpoints but no finished run: a run stopped before its end."""
    return bool(step_checkpoints(Path(run_dir) / "checkpoints")) and not is_finished(run_dir)
