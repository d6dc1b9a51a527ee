"""The runs of a study: their configuration (data regime and embedding choices), seed and
metrics, read from a Hydra sweep directory or from the collected runs (docs/study/runs)."""

from __future__ import annotations

import inspect
import json
import logging
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.config import tying_level
from minimt.data.corpus import read_lines
from minimt.model.embedding import POSITIONAL_ENCODINGS
from minimt.study.protocol import AS_CONFIGURED, PROTOCOLS, Protocol, protocol_of

log = logging.getLogger(__name__)

SHARE_LEVELS = ("all", "decoder", "none")  # embedding.share, most tied first
TIED = {
    "all": "source = target table = output projection",
    "decoder": "target table = output projection",
    "none": "no table shared",
}
LONG_PREFIX = "long_"  # the length split's held-out test sets: long_16-20, long_21-25, long_26+


@dataclass(frozen=True)
class DataRegime:
    """What a run trains on: everything, the length split (sources of at most train_max_words
    words), or a random subsample of train_subsample pairs (the length split's control when
    long_tests_over holds the same long test sets out)."""

    train_max_words: int | None = None
    long_tests_over: int | None = None
    train_subsample: int | None = None

    @property
    def is_control(self) -> bool:
        return self.train_max_words is None and None not in (
            self.long_tests_over,
            self.train_subsample,
        )

    @property
    def slug(self) -> str:
        """full, length15, control15, or the keys that are set (over15_subsample500, ...)."""
        if self.is_control:
            return f"control{self.long_tests_over}"
        parts = []
        if self.train_max_words is not None:
            parts.append(f"length{self.train_max_words}")
        if self.long_tests_over not in (None, self.train_max_words):
            parts.append(f"over{self.long_tests_over}")
        if self.train_subsample is not None:
            parts.append(f"subsample{self.train_subsample}")
        return "_".join(parts) or "full"

    @property
    def label(self) -> str:
        if self.is_control:
            words = self.long_tests_over
            size = self.train_subsample
            pairs = "as many random pairs" if isinstance(size, str) else f"{size:,} random pairs"
            return f"{pairs} as the length split trains on (control of <= {words} words)"
        if self.slug == "full":
            return "full data"
        if self.slug == f"length{self.train_max_words}":
            return f"length split (<= {self.train_max_words} words)"
        return self.slug

    def sort_key(self) -> tuple:
        """Full data first, then each length split followed by its control."""
        words = self.train_max_words if self.train_max_words is not None else self.long_tests_over
        return (words is not None, words or 0, self.is_control, self.slug)


@dataclass(frozen=True)
class Embedding:
    """A run's embedding choices: pe.encoder, pe.decoder, embedding.scale, .share, .init_std,
    and where they differ from their defaults, the learned table's pe.init_std (0.02) and the
    sinusoid's pe.scale (1)."""

    pe_encoder: str
    pe_decoder: str
    scale: bool
    share: str
    init_std: float | None
    pos_init_std: float | None = None
    pos_scale: float | None = None

    @property
    def pe(self) -> str:
        """The encoding's name, or `encoder/decoder` when the sides differ."""
        if self.pe_encoder == self.pe_decoder:
            return self.pe_encoder
        return f"{self.pe_encoder}/{self.pe_decoder}"

    @property
    def slug(self) -> str:
        """The encoding, then only what differs from the baseline (unscaled, share_none, init1)."""
        if self.pe_encoder == self.pe_decoder:
            parts = [self.pe_encoder]
        else:
            parts = [f"enc_{self.pe_encoder}", f"dec_{self.pe_decoder}"]
        if not self.scale:
            parts.append("unscaled")
        if self.share != "all":
            parts.append(f"share_{self.share}")
        if self.init_std is not None:
            parts.append(f"init{self.init_std:g}")
        if self.pos_init_std is not None:
            parts.append(f"posstd{self.pos_init_std:.3g}")
        if self.pos_scale is not None:
            parts.append(f"posscale{self.pos_scale:.3g}")
        return "-".join(parts)

    @property
    def label(self) -> str:
        if self.pe_encoder == self.pe_decoder:
            parts = [self.pe_encoder]
        else:
            parts = [f"{self.pe_encoder} encoder / {self.pe_decoder} decoder"]
        parts.append("scaled" if self.scale else "unscaled")
        parts.append("untied" if self.share == "none" else f"tied {self.share}")
        if self.init_std is not None:
            parts.append(f"init std {self.init_std:g}")
        if self.pos_init_std is not None:
            parts.append(f"position table std {self.pos_init_std:.3g}")
        if self.pos_scale is not None:
            parts.append(f"sinusoid x {self.pos_scale:.3g}")
        return ", ".join(parts)

    def sort_key(self) -> tuple:
        """The baseline first, then by encoding, scale, tying and init."""
        return (
            self != BASELINE_EMBEDDING,
            self.pe_encoder,
            self.pe_decoder,
            not self.scale,
            SHARE_LEVELS.index(self.share),
            self.init_std is not None,
            self.init_std or 0.0,
            self.pos_init_std or 0.0,
            self.pos_scale or 0.0,
        )


BASELINE_EMBEDDING = Embedding("sinusoidal", "sinusoidal", True, "all", None)


@dataclass(frozen=True)
class Configuration:
    """A protocol, a data regime and embedding choices; the runs of one configuration differ
    only by seed."""

    regime: DataRegime
    embedding: Embedding
    protocol: Protocol = AS_CONFIGURED

    @property
    def slug(self) -> str:
        """Its folder name in docs/study/runs: length15-alibi, full-sinusoidal-unscaled-init1,
        cpu-full-rope (the protocol's prefix first)."""
        return self.protocol.slug(self.local_slug)

    @property
    def local_slug(self) -> str:
        """The slug within its protocol (how the study's questions name it): full-rope."""
        return f"{self.regime.slug}-{self.embedding.slug}"

    @property
    def label(self) -> str:
        return f"{self.embedding.label}; {self.regime.label}"

    @property
    def baseline(self) -> Configuration:
        """Its regime's baseline: sinusoidal both sides, scaled, tied all, default init."""
        return Configuration(self.regime, BASELINE_EMBEDDING, self.protocol)

    @property
    def is_baseline(self) -> bool:
        return self.embedding == BASELINE_EMBEDDING

    def sort_key(self) -> tuple:
        return (protocol_rank(self.protocol), self.regime.sort_key(), self.embedding.sort_key())


def protocol_rank(protocol: Protocol) -> tuple:
    """The declared protocols in their order, then the others by name."""
    declared = [p.name for p in PROTOCOLS]
    return (
        declared.index(protocol.name) if protocol.name in declared else len(declared),
        protocol.name,
    )


def encoding_default(name: str, option: str):
    """The default of an encoding's own argument (learned's init_std, sinusoidal's scale), read
    from its class: the one place it is set."""
    return inspect.signature(POSITIONAL_ENCODINGS[name]).parameters[option].default


LEARNED_INIT_STD = encoding_default("learned", "init_std")
SINUSOID_SCALE = encoding_default("sinusoidal", "scale")


def setting(cfg: DictConfig, key: str):
    """The value of a dotted key, or None where the config has no such key (pe.init_std outside
    pe=learned)."""
    return OmegaConf.select(cfg, key, default=None)


def configuration_of(
    cfg: DictConfig, precision: str | None = None, device: str | None = None
) -> Configuration:
    """The configuration of a run's resolved config and the precision and device it trained on."""
    init_std = cfg.embedding.init_std
    pos_init_std = setting(cfg, "pe.init_std")
    pos_scale = setting(cfg, "pe.scale")
    return Configuration(
        DataRegime(
            setting(cfg, "data.train_max_words"),
            setting(cfg, "data.long_tests_over"),
            setting(cfg, "data.train_subsample"),
        ),
        Embedding(
            cfg.pe.encoder,
            cfg.pe.decoder,
            bool(cfg.embedding.scale),
            tying_level(cfg.embedding.share),
            None if init_std is None else float(init_std),
            None if pos_init_std in (None, LEARNED_INIT_STD) else float(pos_init_std),
            None if pos_scale in (None, SINUSOID_SCALE) else float(pos_scale),
        ),
        protocol_of(cfg, precision, device),
    )


@dataclass(frozen=True)
class Run:
    """A finished run: its directory and metrics.json (with the resolved config in "config")."""

    dir: Path
    metrics: dict

    @cached_property
    def config(self) -> DictConfig:
        return OmegaConf.create(self.metrics["config"])

    @cached_property
    def configuration(self) -> Configuration:
        m = self.metrics
        return configuration_of(self.config, m.get("precision"), m.get("device"))

    @property
    def seed(self) -> int:
        return self.config.trainer.seed

    @property
    def test_sets(self) -> list[str]:
        """The test sets it was scored on, in metrics.json order (the headline first)."""
        return list(self.metrics["test"])

    def hyps(self, test_set: str) -> list[str] | None:
        """The saved beam hypotheses of a test set, or None when the file is missing."""
        path = self.dir / f"hyps.{test_set}.txt"
        return read_lines(path) if path.is_file() else None

    def val_bleu_curve(self) -> list[tuple[int, float]]:
        """(step, validation BLEU) of every validation (metrics.json val_history)."""
        return [(h["step"], h["bleu"]) for h in self.metrics["val_history"]]


@dataclass
class Sweep:
    runs: list[Run]
    skipped: list[tuple[Path, str]]  # (run directory, why it is left out)


def load_sweep(sweep_dir: Path, test_set: str | None = None) -> Sweep:
    """Every run directory below `sweep_dir` (one holding metrics.json or Hydra's .hydra/):
    finished runs (scored on `test_set` when given), and the others with the reason they are
    skipped. Of two runs with the same configuration and seed the first (by path) is kept."""
    dirs = {p.parent for p in sweep_dir.rglob("metrics.json")}
    dirs |= {p.parent for p in sweep_dir.rglob(".hydra") if p.is_dir()}
    sweep = Sweep(runs=[], skipped=[])
    kept: dict[tuple[Configuration, int], Path] = {}
    for run_dir in sorted(dirs):
        run, reason = _load_run(run_dir, test_set)
        if run is not None:
            first = kept.setdefault((run.configuration, run.seed), run_dir)
            if first == run_dir:
                sweep.runs.append(run)
                continue
            reason = f"same configuration and seed as {first.relative_to(sweep_dir)}"
        log.warning("skipping %s: %s", run_dir, reason)
        sweep.skipped.append((run_dir, reason))
    return sweep


def _load_run(run_dir: Path, test_set: str | None) -> tuple[Run | None, str]:
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
    if not metrics.get("test"):
        return None, "metrics.json has no test score"
    if test_set is not None and test_set not in metrics["test"]:
        return None, f"metrics.json has no {test_set} score"
    return Run(run_dir, metrics), ""
