"""Checkpoints and run files written atomically, and loaded without executing code."""

from __future__ import annotations

import json
import math
import pickle
import re
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from minimt.atomic import WriteError, atomic_write, write_text
from minimt.errors import MinimtError, NotFound
from minimt.migrations import FORMAT_KEY, RUN_FORMAT, UnknownFormat, upgraded

# Where runs of run formats 1-3 saved what resuming needs (later runs: the newest step_<N>.pt).
OLD_LAST = "last.pt"


class CheckpointError(MinimtError, RuntimeError):
    """A checkpoint that cannot be written, read or used; the message names the file."""


class CheckpointMismatch(CheckpointError):
    """A checkpoint whose weights or settings do not fit the configured model."""


class DamagedCheckpoint(CheckpointError):
    """A checkpoint file cut short or corrupted (a copy that did not finish, a bad disk)."""


class NonFiniteCheckpoint(DamagedCheckpoint):
    """A well-formed checkpoint whose weights or optimizer state hold NaN or inf: a model that
    would translate into empty lines."""


class CheckpointWithCode(CheckpointError):
    """A checkpoint that holds pickled code besides tensors and numbers: refused, never run."""


class CheckpointWriteError(CheckpointError, WriteError):
    """A checkpoint that could not be written (a full disk); the files already there are kept."""


def json_text(data: dict) -> str:
    """`data` as the project's JSON files hold it: indented by 2, ending in a newline."""
    return json.dumps(data, indent=2) + "\n"


def save_json(path: str | Path, data: dict) -> None:
    write_text(path, json_text(data))


def save_checkpoint(path: str | Path, checkpoint: dict[str, Any]) -> None:
    """Save tensors, numbers, strings and containers of them (what weights_only loading accepts).

    A failed write (a full disk) leaves the file previously at `path` as it was.
    """
    where = first_nonfinite(checkpoint)
    if where is not None:
        raise NonFiniteCheckpoint(
            f"not saving checkpoint {path}: its {where}; the checkpoints already in "
            f"{Path(path).parent} are intact"
        )
    try:
        with atomic_write(path) as tmp, tmp.open("wb") as file:
            _torch_save(checkpoint, file)
    except WriteError as error:
        raise CheckpointWriteError(
            f"{error}; the checkpoints already in {Path(path).parent} are intact"
        ) from error


def _torch_save(checkpoint: dict[str, Any], file) -> None:
    """torch.save into an open file, a failed write raised as the OSError behind it: torch
    reports one as RuntimeError("[enforce fail at inline_container.cc] unexpected pos ...")."""
    try:
        torch.save(checkpoint, file)
    except RuntimeError as error:
        cause = error.__context__
        while cause is not None and not isinstance(cause, OSError):
            cause = cause.__context__
        if cause is None:
            raise OSError(f"torch.save stopped ({error})") from error
        raise OSError(cause.errno, cause.strerror) from error


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Load a checkpoint onto the CPU, its config in today's run format (minimt.migrations);
    `weights_only=True` refuses anything that would run code."""
    path = Path(path)
    checkpoint = read_checkpoint(path)
    where = first_nonfinite(checkpoint)
    if where is not None:
        raise NonFiniteCheckpoint(f"cannot use checkpoint {path}: its {where}")
    try:
        return upgraded(checkpoint) if isinstance(checkpoint, dict) else checkpoint
    except UnknownFormat as error:
        raise CheckpointMismatch(f"cannot use checkpoint {path}: {error}") from error


def first_nonfinite(checkpoint: object) -> str | None:
    """Where a checkpoint's weights ("model") or optimizer state first hold NaN or inf, in words
    ("weight encoder_layers.0.ffn.w1.weight holds 512 NaN or inf values of 8192"); None if
    they are finite."""
    if not isinstance(checkpoint, dict):
        return None
    parts = (("weight", checkpoint.get("model")), ("optimizer state", checkpoint.get("optimizer")))
    for what, part in parts:
        for name, tensor in tensors_in(part, ""):
            bad = tensor.numel() - int(torch.isfinite(tensor).sum())
            if bad:
                return f"{what} {name} holds {bad} NaN or inf values of {tensor.numel()}"
    return None


def tensors_in(node: object, name: str) -> Iterator[tuple[str, Tensor]]:
    """The floating-point tensors in nested dicts and lists, with their dotted names."""
    if isinstance(node, Tensor):
        if node.is_floating_point():
            yield name, node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield from tensors_in(value, f"{name}.{key}" if name else str(key))
    elif isinstance(node, list | tuple):
        for i, value in enumerate(node):
            yield from tensors_in(value, f"{name}.{i}" if name else str(i))


def read_checkpoint(path: Path) -> dict[str, Any]:
    """The checkpoint at `path` as saved."""
    if not path.is_file():
        raise NotFound(f"no checkpoint at {path}")
    try:
        damage = archive_damage(path)
        if damage is None:
            return torch.load(path, map_location="cpu", weights_only=True)
    except (RuntimeError, EOFError, OSError, pickle.UnpicklingError) as error:
        code = re.search(r"GLOBAL ([\w.]+)", str(error))  # what weights_only refused to import
        if isinstance(error, pickle.UnpicklingError) and code:
            # from None: torch's message advises weights_only=False, which would run that code
            raise CheckpointWithCode(
                f"refusing checkpoint {path}: it holds code ({code[1]}) and minimt refuses to "
                "run code from a file (checkpoints load weights only); use a checkpoint that "
                "minimt's training wrote"
            ) from None
        damage = str(error).split(". ")[0].strip() or type(error).__name__
    raise DamagedCheckpoint(
        f"cannot load checkpoint {path}: it is damaged (cut short or corrupted: {damage})"
    )


def archive_damage(path: Path) -> str | None:
    """What is wrong with the zip archive torch.save wrote at `path`, None if each member's CRC-32
    matches (torch.load never checks them: a changed byte would load as a wrong weight)."""
    try:
        with zipfile.ZipFile(path) as archive:
            bad_member = archive.testzip()
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError) as error:
        return str(error) or type(error).__name__
    return None if bad_member is None else f"{bad_member} fails its checksum"


def is_loadable(path: Path) -> bool:
    """Whether the checkpoint at `path` loads."""
    try:
        load_checkpoint(path)
    except (CheckpointError, NotFound):
        return False
    return True


def newest_loadable(ckpt_dir: str | Path, other_than: Path | None = None) -> Path | None:
    """The newest step_<N>.pt in `ckpt_dir` (but `other_than`) that loads, or None."""
    steps = reversed(step_checkpoints(ckpt_dir))
    return next((path for path in steps if path != other_than and is_loadable(path)), None)


def latest_checkpoint(ckpt_dir: str | Path) -> Path:
    """The newest numbered checkpoint in `ckpt_dir` (the one a resumed run continues from); in a
    run of the oldest formats, which saved its progress as last.pt, that file where it is newer."""
    paths = step_checkpoints(ckpt_dir)
    old_last = Path(ckpt_dir) / OLD_LAST
    if old_last.is_file() and (not paths or saved_step(old_last) >= saved_step(paths[-1])):
        return old_last
    if not paths:
        raise NotFound(
            f"no numbered checkpoint (step_<N>.pt) in {ckpt_dir}: the run stopped before its "
            "first save (trainer.save_every steps); start it again instead of resuming"
        )
    return paths[-1]


def step_of(checkpoint: str | Path) -> int:
    """The update a numbered checkpoint was saved at: "step_800.pt" -> 800."""
    return int(Path(checkpoint).stem.split("_")[1])


def saved_step(path: Path) -> int:
    """The update a checkpoint was saved at (its name's, or for last.pt its progress's)."""
    if path.name != OLD_LAST:
        return step_of(path)
    return load_checkpoint(path)["state"]["step"]


def resume_checkpoint(resume: str | Path) -> Path:
    """`resume=RUN_DIR` means its newest numbered checkpoint; `resume=FILE` means that file."""
    resume = Path(resume)
    if resume.is_dir():
        return latest_checkpoint(resume / "checkpoints")
    if resume.is_file():
        return resume
    raise NotFound(
        f"resume={resume}: no such run directory or checkpoint file (give the run's directory, "
        "e.g. outputs/2026-11-21/10-00-00, or one of its checkpoints/step_<N>.pt)"
    )


def run_dir_of(resume: str | Path) -> Path:
    """The run directory that `resume` (a run directory or a checkpoint in it) belongs to."""
    resume = Path(resume)
    return resume.parent.parent if resume.is_file() else resume


def config_mismatches(saved: dict, cfg: DictConfig, keys: tuple[str, ...]) -> list[str]:
    """`key: checkpoint X, config Y` for each of `keys` whose value differs."""
    saved_cfg = OmegaConf.create(saved)
    problems = []
    for key in keys:
        old, new = OmegaConf.select(saved_cfg, key), OmegaConf.select(cfg, key)
        if old != new:
            problems.append(f"{key}: checkpoint {old!r}, config {new!r}")
    return problems


def load_weights(model: nn.Module, weights: dict[str, Tensor], source: str | Path) -> None:
    """load_state_dict, with a mismatch reported by parameter name and shape, not a traceback."""
    problems = weight_mismatches(model.state_dict(), weights, "model")
    if problems:
        raise CheckpointMismatch(
            f"checkpoint {source} does not fit the model (was it saved by a run with another "
            "vocabulary or architecture?):\n  " + "\n  ".join(problems)
        )
    model.load_state_dict(weights)


def weight_mismatches(
    expected: dict[str, Tensor], weights: dict[str, Tensor], what: str
) -> list[str]:
    """`name: checkpoint SHAPE, <what> SHAPE` for each weight missing or shaped otherwise."""
    problems = [f"{key}: missing from the checkpoint" for key in expected.keys() - weights.keys()]
    problems += [f"{key}: not in the {what}" for key in weights.keys() - expected.keys()]
    problems += [
        f"{key}: checkpoint {tuple(weights[key].shape)}, {what} {tuple(tensor.shape)}"
        for key, tensor in expected.items()
        if key in weights and weights[key].shape != tensor.shape
    ]
    return sorted(problems)


def step_checkpoints(ckpt_dir: str | Path) -> list[Path]:
    """The numbered checkpoints step_<N>.pt in `ckpt_dir`, oldest first."""
    return sorted(Path(ckpt_dir).glob("step_*.pt"), key=step_of)


def remove_old_checkpoints(ckpt_dir: str | Path, keep: int, keep_from: int | None = None) -> None:
    """Delete all but the newest `keep` numbered checkpoints (the newest is never deleted) and,
    with `keep_from`, those saved at that update or later."""
    for path in step_checkpoints(ckpt_dir)[: -max(keep, 1)]:
        if keep_from is None or step_of(path) < keep_from:
            path.unlink()


def load_weights_from(model: nn.Module, path: Path) -> None:
    """The model weights of the checkpoint at `path` into `model` (load_weights' checks)."""
    load_weights(model, load_checkpoint(path)["model"], path)


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


def averaged_from(updates: int, share: float) -> int:
    """The first update of the last `share` of `updates` (at least the last one): the step
    checkpoints from it on are averaged. `share` is rounded to 9 digits first, so that 0.7 of
    1,000 updates is 700, not 699.99999999999989."""
    return max(updates - math.floor(round(share * updates, 9)), 1)


def average_last_checkpoints(ckpt_dir: str | Path, last: int) -> Path:
    """Average the newest `last` step_<N>.pt into averaged.pt (config and state of the newest)."""
    return average_checkpoints(ckpt_dir, step_checkpoints(ckpt_dir)[-last:])


def average_checkpoints(ckpt_dir: str | Path, paths: list[Path]) -> Path:
    """Average the step checkpoints `paths` (oldest first) into `ckpt_dir`/averaged.pt, with the
    config and state of the newest."""
    if not paths:
        raise NotFound(f"no numbered checkpoints (step_<N>.pt) in {ckpt_dir}")
    checkpoints = [load_checkpoint(p) for p in paths]
    for path, checkpoint in zip(paths, checkpoints, strict=True):
        problems = weight_mismatches(checkpoints[-1]["model"], checkpoint["model"], paths[-1].name)
        if problems:
            raise CheckpointMismatch(
                f"cannot average checkpoint {path} with {paths[-1]}: they hold different "
                "models (was it copied from another run?):\n  " + "\n  ".join(problems)
            )
    averaged = {
        FORMAT_KEY: RUN_FORMAT,
        "state": checkpoints[-1]["state"],
        "config": checkpoints[-1]["config"],
        "model": average_state_dicts([c["model"] for c in checkpoints]),
        "averaged_from": [p.name for p in paths],
    }
    out = Path(ckpt_dir) / "averaged.pt"
    save_checkpoint(out, averaged)
    return out
