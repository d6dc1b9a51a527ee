"""The runs of a sweep directory: their embedding configuration, seed, metrics and curves."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Configuration:
    """An embedding configuration; the runs of one configuration differ only by seed."""

    pe: str
    scale: bool
    share: bool

    @property
    def label(self) -> str:
        scaled = "scaled" if self.scale else "unscaled"
        return f"{self.pe} {scaled} {'shared' if self.share else 'separate'}"


BASELINE = Configuration("sinusoidal", scale=True, share=True)


@dataclass(frozen=True)
class Run:
    """A finished run: its directory and metrics.json (with the resolved config in "config")."""

    dir: Path
    metrics: dict

    @cached_property
    def config(self) -> DictConfig:
        return OmegaConf.create(self.metrics["config"])

    @property
    def configuration(self) -> Configuration:
        cfg = self.config
        return Configuration(cfg.pe.name, bool(cfg.embedding.scale), bool(cfg.embedding.share))

    @property
    def seed(self) -> int:
        return self.config.trainer.seed

    def hyps(self, test_set: str) -> list[str] | None:
        """The saved beam hypotheses of a test set, or None when the file is missing."""
        path = self.dir / f"hyps.{test_set}.txt"
        return path.read_text(encoding="utf-8").splitlines() if path.is_file() else None

    def val_bleu_curve(self) -> list[tuple[int, float]]:
        """(step, validation BLEU) from the TensorBoard events, else from metrics.json."""
        events = EventAccumulator(str(self.dir), size_guidance={"scalars": 0}).Reload()
        if "val/bleu" in events.Tags()["scalars"]:
            return [(e.step, e.value) for e in events.Scalars("val/bleu")]
        return [(h["step"], h["bleu"]) for h in self.metrics["val_history"]]


@dataclass
class Sweep:
    runs: list[Run]
    skipped: list[tuple[Path, str]]  # (run directory, why it is left out)


def load_sweep(sweep_dir: Path, test_set: str) -> Sweep:
    """Every run directory below `sweep_dir` (one holding metrics.json or Hydra's .hydra/):
    finished runs scored on `test_set`, and the others with the reason they are skipped."""
    dirs = {p.parent for p in sweep_dir.rglob("metrics.json")}
    dirs |= {p.parent for p in sweep_dir.rglob(".hydra") if p.is_dir()}
    sweep = Sweep(runs=[], skipped=[])
    for run_dir in sorted(dirs):
        run, reason = _load_run(run_dir, test_set)
        if run is None:
            log.warning("skipping %s: %s", run_dir, reason)
            sweep.skipped.append((run_dir, reason))
        else:
            sweep.runs.append(run)
    return sweep


def _load_run(run_dir: Path, test_set: str) -> tuple[Run | None, str]:
    """The run, or None and why it cannot be reported."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return None, "no metrics.json (failed or unfinished)"
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"metrics.json is not valid JSON ({error})"
    if "config" not in metrics:
        return None, 'metrics.json has no "config"'
    if test_set not in metrics.get("test", {}):
        return None, f"metrics.json has no {test_set} score"
    return Run(run_dir, metrics), ""
