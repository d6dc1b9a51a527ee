"""The study's runs: the protocol and configuration each trained (read from its saved config), its
metrics and hypotheses, from a sweep directory or from the collected runs (docs/study/runs)."""

from __future__ import annotations

import inspect
import json
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from functools import cache, cached_property
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from minimt.config import tying_level
from minimt.data.corpus import read_lines
from minimt.model.embedding import POSITIONAL_ENCODINGS, sinusoidal_table

log = logging.getLogger(__name__)

CONFIG_DIR = Path("configs")  # relative, as the data paths are: reports run from the project root
# The settings that make two runs comparable: not the caps (max_steps, max_minutes), nor the seed.
PROTOCOL_KEYS = [
    f"{group}.{key}"
    for group, keys in {
        "model": "d_model n_heads n_encoder_layers n_decoder_layers d_ff dropout",
        "tokenizer": "vocab_size joint",
        "trainer": "batch_tokens accumulate lr warmup_steps patience min_delta val_every",
        "data": "max_train_len max_val_pairs",
    }.items()
    for key in keys.split()
]
TIED = {  # embedding.share, most tied first
    "all": "source = target table = output projection",
    "decoder": "target table = output projection",
    "none": "no table shared",
}


@dataclass(frozen=True)
class Protocol:
    """An experiment config in one precision on one kind of device: never paired with another."""

    name: str  # "" for runs that match no declared protocol
    experiment: str | None
    precision: str | None
    device_kind: str | None  # cuda | cpu
    device: str  # in words
    slug_prefix: str  # before its configurations' slugs

    def slug(self, local_slug: str) -> str:
        return f"{self.slug_prefix}-{local_slug}" if self.slug_prefix else local_slug

    @property
    def title(self) -> str:
        if not self.name:
            return "as configured"
        return f"experiment={self.experiment}, {self.precision} on {self.device}"


PROTOCOLS = (  # in the report's order
    Protocol("study", "study", "bf16", "cuda", "one NVIDIA H100", ""),
    Protocol("study_cpu", "study_cpu", "fp32", "cpu", "a 2-core CPU", "cpu"),
)
AS_CONFIGURED = Protocol("", None, None, None, "", "")


def setting(cfg: DictConfig, key: str):
    """A dotted key's value; None where the config has no such key."""
    return OmegaConf.select(cfg, key, default=None)


@cache
def experiment_settings(experiment: str) -> list | None:
    """The PROTOCOL_KEYS of `experiment=<experiment>`; None without that experiment config."""
    if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").is_file():
        return None
    with initialize_config_dir(config_dir=str(CONFIG_DIR.resolve()), version_base="1.3"):
        cfg = compose("config", overrides=[f"experiment={experiment}"])
        return [setting(cfg, key) for key in PROTOCOL_KEYS]


def protocol_of(cfg: DictConfig, precision: str | None, device: str | None = None) -> Protocol:
    """The declared protocol with cfg's settings, precision and kind of device (any, for runs
    saved before the device was recorded); the same settings in another precision or on another
    kind of device are a protocol of their own; AS_CONFIGURED where no experiment matches."""
    kind = None if device is None else "cpu" if device == "cpu" else "cuda"
    for p in PROTOCOLS:
        if experiment_settings(p.experiment) != [setting(cfg, key) for key in PROTOCOL_KEYS]:
            continue
        same_device = kind in (None, p.device_kind)
        if precision == p.precision and same_device:
            return p
        name = "_".join([p.name, str(precision), *([] if same_device else [kind])])
        return Protocol(name, p.experiment, precision, kind, device or p.device, name)
    return AS_CONFIGURED


@dataclass(frozen=True)
class DataRegime:
    """All the data, the length split (sources of at most train_max_words words), or a random
    subsample (the split's control when long_tests_over holds the same long test sets out)."""

    train_max_words: int | None = None
    long_tests_over: int | None = None
    train_subsample: int | str | None = None

    @property
    def is_control(self) -> bool:
        subsampled = None not in (self.long_tests_over, self.train_subsample)
        return self.train_max_words is None and subsampled

    @property
    def slug(self) -> str:
        """full, length15, control15, or the keys that are set (over15_subsample500, ...)."""
        if self.is_control:
            return f"control{self.long_tests_over}"
        parts = [] if self.train_max_words is None else [f"length{self.train_max_words}"]
        if self.long_tests_over not in (None, self.train_max_words):
            parts.append(f"over{self.long_tests_over}")
        if self.train_subsample is not None:
            parts.append(f"subsample{self.train_subsample}")
        return "_".join(parts) or "full"

    @property
    def label(self) -> str:
        size, words = self.train_subsample, self.long_tests_over
        if self.is_control:
            pairs = "as many random pairs" if isinstance(size, str) else f"{size:,} random pairs"
            return f"{pairs} as the length split trains on (control of <= {words} words)"
        if self.slug == f"length{self.train_max_words}":
            return f"length split (<= {self.train_max_words} words)"
        return "full data" if self.slug == "full" else self.slug

    def sort_key(self) -> tuple:
        """Full data first, then each length split followed by its control."""
        words = self.train_max_words if self.train_max_words is not None else self.long_tests_over
        return (words is not None, words or 0, self.is_control, self.slug)


# The encodings' own defaults, read from their classes: the one place they are set.
LEARNED_INIT_STD, SINUSOID_SCALE = (
    inspect.signature(POSITIONAL_ENCODINGS[name]).parameters[option].default
    for name, option in (("learned", "init_std"), ("sinusoidal", "scale"))
)


@dataclass(frozen=True)
class Embedding:
    """pe.encoder, .decoder, embedding.scale, .share, .init_std, and pe.init_std / pe.scale where
    they differ from the encoding's default."""

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
        same = self.pe_encoder == self.pe_decoder
        return self.pe_encoder if same else f"{self.pe_encoder}/{self.pe_decoder}"

    def options(self, slug: bool) -> list[str]:
        """The init options set, as slug parts (init1, posstd0.0884) or in words."""
        named = [
            (self.init_std, "init{:g}", "init std {:g}"),
            (self.pos_init_std, "posstd{:.3g}", "position table std {:.3g}"),
            (self.pos_scale, "posscale{:.3g}", "sinusoid x {:.3g}"),
        ]
        return [(short if slug else words).format(v) for v, short, words in named if v is not None]

    @property
    def slug(self) -> str:
        """The encoding, then what differs from the baseline: rope-unscaled-share_none."""
        sides = [f"enc_{self.pe_encoder}", f"dec_{self.pe_decoder}"]
        parts = [self.pe] if self.pe_encoder == self.pe_decoder else sides
        parts += [] if self.scale else ["unscaled"]
        parts += [] if self.share == "all" else [f"share_{self.share}"]
        return "-".join(parts + self.options(slug=True))

    @property
    def label(self) -> str:
        sides = f"{self.pe_encoder} encoder / {self.pe_decoder} decoder"
        tied = "untied" if self.share == "none" else f"tied {self.share}"
        parts = [self.pe if self.pe_encoder == self.pe_decoder else sides]
        parts += ["scaled" if self.scale else "unscaled", tied]
        return ", ".join(parts + self.options(slug=False))

    def sort_key(self) -> tuple:
        """The baseline first, then by encoding, scale, tying and init."""
        init = [self.init_std is not None, self.init_std or 0.0]
        positions = [self.pos_init_std or 0.0, self.pos_scale or 0.0]
        encoding = [self != BASELINE_EMBEDDING, self.pe_encoder, self.pe_decoder, not self.scale]
        return (*encoding, list(TIED).index(self.share), *init, *positions)


BASELINE_EMBEDDING = Embedding("sinusoidal", "sinusoidal", True, "all", None)


@dataclass(frozen=True)
class Configuration:
    """A protocol, a data regime and embedding choices: its runs differ only by seed."""

    regime: DataRegime
    embedding: Embedding
    protocol: Protocol = AS_CONFIGURED

    @property
    def slug(self) -> str:
        """Its folder in docs/study/runs: length15-alibi, cpu-full-rope (the protocol's prefix)."""
        return self.protocol.slug(self.local_slug)

    @property
    def local_slug(self) -> str:
        """Its slug within its protocol, as the study's questions name it: full-rope."""
        return f"{self.regime.slug}-{self.embedding.slug}"

    @property
    def label(self) -> str:
        return f"{self.embedding.label}; {self.regime.label}"

    @property
    def baseline(self) -> Configuration:
        return Configuration(self.regime, BASELINE_EMBEDDING, self.protocol)

    @property
    def is_baseline(self) -> bool:
        return self.embedding == BASELINE_EMBEDDING

    def sort_key(self) -> tuple:
        """By protocol (the declared ones in order), data regime, embedding."""
        declared = [p.name for p in PROTOCOLS]
        name = self.protocol.name
        rank = declared.index(name) if name in declared else len(declared)
        return ((rank, name), self.regime.sort_key(), self.embedding.sort_key())


def configuration_of(
    cfg: DictConfig, precision: str | None = None, device: str | None = None
) -> Configuration:
    """The configuration of a run's resolved config and the precision and device it trained on."""
    init_std, pos_init_std, pos_scale = (
        setting(cfg, key) for key in ("embedding.init_std", "pe.init_std", "pe.scale")
    )
    regime = DataRegime(*(setting(cfg, f"data.{f.name}") for f in fields(DataRegime)))
    embedding = Embedding(
        cfg.pe.encoder,
        cfg.pe.decoder,
        bool(cfg.embedding.scale),
        tying_level(cfg.embedding.share),
        None if init_std is None else float(init_std),
        None if pos_init_std in (None, LEARNED_INIT_STD) else float(pos_init_std),
        None if pos_scale in (None, SINUSOID_SCALE) else float(pos_scale),
    )
    return Configuration(regime, embedding, protocol_of(cfg, precision, device))


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

    def scores(self, test_set: str) -> dict:
        return self.metrics["test"][test_set]

    def hyps(self, test_set: str) -> list[str] | None:
        """The saved beam hypotheses of a test set; None when the file is missing."""
        path = self.dir / f"hyps.{test_set}.txt"
        return read_lines(path) if path.is_file() else None


def scores_of(runs: Sequence[Run], test_set: str, key: str) -> list[float]:
    """metrics.json "test" -> test_set -> key of each run that has it."""
    scores = [run.scores(test_set).get(key) for run in runs]
    return [score for score in scores if score is not None]


def init_ratio(run: Run) -> float | None:
    """Token : position RMS at the input at init (source side): as metrics.json recorded it, or
    as the config gives it (token RMS = scale x init std; the sinusoid's RMS over the training
    positions, or the learned table's init std); None where nothing is added to the input."""
    recorded = run.metrics.get("input_magnitudes", {}).get("init", {}).get("src")
    if recorded:
        return recorded["ratio"]
    cfg = run.config
    d_model = cfg.model.d_model
    scale = math.sqrt(d_model) if cfg.embedding.scale else 1.0
    token = (cfg.embedding.init_std or d_model**-0.5) * scale
    if cfg.pe.encoder == "sinusoidal":
        table = sinusoidal_table(cfg.data.max_train_len + 1, d_model)
        return token / (cfg.pe.get("scale", SINUSOID_SCALE) * table.pow(2).mean().sqrt().item())
    if cfg.pe.encoder == "learned":
        return token / cfg.pe.get("init_std", LEARNED_INIT_STD)
    return None


@dataclass
class Sweep:
    runs: list[Run]
    skipped: list[tuple[Path, str]]  # (run directory, why it is left out)


def load_sweep(sweep_dir: Path, test_set: str | None = None) -> Sweep:
    """Every run directory below `sweep_dir` (holding metrics.json or .hydra/): the finished runs
    (scored on `test_set` when given) and the others with why they are skipped. Of two runs with
    the same configuration and seed the first (by path) is kept."""
    dirs = {p.parent for p in sweep_dir.rglob("metrics.json")}
    dirs |= {p.parent for p in sweep_dir.rglob(".hydra") if p.is_dir()}
    sweep, kept = Sweep([], []), {}
    for run_dir in sorted(dirs):
        run, reason = load_run(run_dir, test_set)
        if run is not None:
            first = kept.setdefault((run.configuration, run.seed), run_dir)
            if first == run_dir:
                sweep.runs.append(run)
                continue
            reason = f"same configuration and seed as {first.relative_to(sweep_dir)}"
        log.warning("skipping %s: %s", run_dir, reason)
        sweep.skipped.append((run_dir, reason))
    return sweep


def load_run(run_dir: Path, test_set: str | None) -> tuple[Run | None, str]:
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


def collected_dir(dest: Path, run: Run) -> Path:
    """Where collect_runs keeps a run: DEST/<configuration slug>/seed<k>."""
    return dest / run.configuration.slug / f"seed{run.seed}"


def kept_files(folder: Path) -> dict[str, bytes]:
    """The files a collected run keeps: metrics.json, config.yaml and hyps.*.txt (those present)."""
    paths = [folder / "metrics.json", folder / "config.yaml", *sorted(folder.glob("hyps.*.txt"))]
    return {path.name: path.read_bytes() for path in paths if path.is_file()}


def collect_runs(sweep_dir: Path, dest: Path) -> list[tuple[Path, str]]:
    """Copy each finished run under `sweep_dir` to collected_dir(dest, run), with its resolved
    config as config.yaml; returns (destination, "copied" | "unchanged" | "replaced") per run. A
    run whose files differ is replaced, with a warning."""
    done = []
    for run in load_sweep(sweep_dir).runs:
        target = collected_dir(dest, run)
        files = kept_files(run.dir) | {"config.yaml": OmegaConf.to_yaml(run.config).encode()}
        present = kept_files(target)
        if present == files:
            done.append((target, "unchanged"))
            continue
        if present:
            log.warning("%s differs from %s: replacing it", target, run.dir)
            for name in present:
                (target / name).unlink()
        target.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (target / name).write_bytes(content)
        done.append((target, "replaced" if present else "copied"))
    return done
