"""The study's runs: each finished run's metrics.json, the protocol it trained under and the arm it
ran (both recorded in metrics.json "choices"), from a sweep directory or from the collected runs
(docs/study/runs)."""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import CheckpointError, load_checkpoint
from minimt.data.length_split import LONG_PREFIX
from minimt.errors import NotFound
from minimt.migrations import UnknownFormat, upgraded
from minimt.model.positions import sinusoidal_table
from minimt.provenance import describe_machine
from minimt.rundir import DamagedRecord

log = logging.getLogger(__name__)

SIDECAR = "provenance.json"

# Not what sets a configuration apart: seed, caps, data location, the test sets scored at the end,
# logging and saving, threads.
NOT_A_SETTING = set("resume views data.dir data.url choices.sweep choices.arm".split())
NOT_A_SETTING.add("data.test_sets")
NOT_A_SETTING |= {f"trainer.{k}" for k in "seed max_steps max_minutes max_epochs log_every".split()}
NOT_A_SETTING |= {f"trainer.{k}" for k in "save_every keep_checkpoints prefetch".split()}
NOT_A_SETTING.add("trainer.num_threads")


@dataclass(frozen=True)
class Protocol:
    """An experiment config in one precision on one kind of device: never paired with another."""

    experiment: str  # "" for runs that chose none
    precision: str
    device: str  # cpu | cuda

    @property
    def name(self) -> str:
        if self in DECLARED:
            return self.experiment
        return "_".join(
            filter(None, [self.experiment or "as_configured", self.precision, self.device])
        )

    @property
    def title(self) -> str:
        device = DECLARED.get(self, self.device)
        return f"experiment={self.experiment or '(none)'}, {self.precision} on {device}"

    @property
    def rank(self) -> tuple:
        """The declared protocols first, then the others, each by name."""
        return self not in DECLARED, self.name


DECLARED = {  # the study's protocols and their device in words
    Protocol("study", "bf16", "cuda"): "one NVIDIA H100",
    Protocol("study_cpu", "fp32", "cpu"): "a 2-core CPU",
}


def protocol_of(metrics: dict) -> Protocol:
    """The run's experiment, precision and kind of device ("cpu", or "cuda" for a GPU's name)."""
    experiment = metrics.get("choices", {}).get("experiment") or ""
    precision, device = metrics.get("precision") or "", metrics.get("device") or ""
    return Protocol(experiment, precision, "cpu" if device == "cpu" else "cuda" if device else "")


@dataclass(frozen=True)
class Configuration:
    """A protocol and what a run ran in it (its arm, and the settings that set it apart from the
    other runs of that arm): its runs differ only in NOT_A_SETTING."""

    protocol: Protocol
    name: str


@dataclass
class Run:
    """A finished run: its directory and metrics.json (with the resolved config in "config"), in
    today's run format; `record` is metrics.json as saved (the same where nothing migrated)."""

    dir: Path
    metrics: dict
    name: str = ""  # its configuration's name, set by load_sweep; "" reads as its arm
    record: dict | None = None

    def __post_init__(self) -> None:
        if self.record is None:
            self.record = self.metrics

    @cached_property
    def config(self) -> DictConfig:
        return OmegaConf.create(self.metrics["config"])

    @property
    def arm(self) -> str | None:
        return self.metrics.get("choices", {}).get("arm")

    @property
    def configuration(self) -> Configuration:
        return Configuration(protocol_of(self.metrics), self.name or self.arm or "as_configured")

    @property
    def seed(self) -> int:
        return self.setting("trainer.seed")

    def setting(self, key: str) -> object:
        """The resolved config's value at the dotted `key` ("model.d_model"), None where it has
        none: read from metrics.json's dict, as building `config` costs more than the lookup."""
        node = self.metrics["config"]
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    @cached_property
    def provenance(self) -> dict:
        """metrics.json "provenance", with what its sidecar provenance.json adds or corrects."""
        return self.metrics.get("provenance", {}) | read_sidecar(self.dir)

    @property
    def machine(self) -> str:
        """What it trained on, in words: as its provenance (sidecar included) describes it, else
        the GPU's name "device" gives, else "unrecorded"."""
        if self.provenance:
            return describe_machine(self.provenance)
        device = self.metrics.get("device")
        return device if device and device != "cpu" else "unrecorded"

    @property
    def test_sets(self) -> list[str]:
        """The test sets it was scored on, in metrics.json order (the headline first)."""
        return list(self.metrics["test"])

    def scores(self, test_set: str) -> dict:
        return self.metrics["test"][test_set]

    @property
    def stopped_by(self) -> str:
        """The config key of its "stop_reason" ('trainer.patience reached ...' -> patience)."""
        reason = self.metrics.get("stop_reason")
        return "-" if reason is None else reason.split(" reached")[0].removeprefix("trainer.")


def read_sidecar(run_dir: Path) -> dict:
    """run_dir/provenance.json: what a collected run's record lacks about where and how it trained
    (its machine's fields, the environment, starts that led nowhere, deviations from its plan),
    written once beside a record made before metrics.json held it; {} where there is none."""
    path = run_dir / SIDECAR
    if not path.is_file():
        return {}
    try:
        sidecar = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise DamagedRecord(f"{path} is not valid JSON ({error}); restore it from git") from error
    if not isinstance(sidecar, dict):
        raise DamagedRecord(f"{path} holds no JSON object; restore it from git")
    return sidecar


def scores_of(runs: Sequence[Run], test_set: str, key: str) -> list[float]:
    """metrics.json "test" -> test_set -> key of each run that has it."""
    scores = [run.scores(test_set).get(key) for run in runs]
    return [score for score in scores if score is not None]


def shared_test_sets(runs: Sequence[Run]) -> list[str]:
    """The test sets every run has, in the first run's order."""
    common = set.intersection(*(set(run.test_sets) for run in runs))
    return [name for name in runs[0].test_sets if name in common]


def long_test_sets(runs: Sequence[Run]) -> list[str]:
    return [name for name in shared_test_sets(runs) if name.startswith(LONG_PREFIX)]


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
        return token / (cfg.pe.scale * table.pow(2).mean().sqrt().item())
    if cfg.pe.encoder == "learned":
        return token / cfg.pe.init_std
    return None


def settings(run: Run) -> dict[str, str]:
    """The run's config groups chosen ("choices.pe") and resolved config leaves, as strings; a
    null leaf reads as a missing one."""

    def leaves(node, prefix: str):
        if not isinstance(node, dict):
            yield prefix, node
            return
        for key, value in node.items():
            yield from leaves(value, f"{prefix}.{key}" if prefix else key)

    found = list(leaves({"choices": run.metrics.get("choices", {}), **run.metrics["config"]}, ""))
    ignored = NOT_A_SETTING | {key for key, value in found if value is None}
    return {k: v if isinstance(v, str) else json.dumps(v) for k, v in found if k not in ignored}


def name_configurations(runs: Sequence[Run]) -> None:
    """Set each run's configuration name: its arm, and where the runs of one protocol and arm (or
    of none) differ in other settings, those that tell them apart, a group chosen before a config
    key and each only where it splits them further: `pe=learned embedding.scale=false`."""
    groups = defaultdict(list)
    for run in runs:
        groups[run.configuration].append(run)
    for configuration, group in groups.items():
        arm, values = configuration.name, [settings(run) for run in group]
        chosen, classes = [], 1
        for key in sorted(set().union(*values), key=lambda k: (not k.startswith("choices."), k)):
            split = len({tuple(v.get(k) for k in [*chosen, key]) for v in values})
            if split > classes:
                chosen, classes = [*chosen, key], split
        for run, v in zip(group, values, strict=True):
            parts = [f"{key.removeprefix('choices.')}={v.get(key)}" for key in chosen]
            run.name = " ".join(([arm] if arm != "as_configured" else []) + parts) or arm


def load_sweep(
    sweep_dir: Path, test_set: str | None = None
) -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every run directory below `sweep_dir` (holding metrics.json or .hydra/): the finished runs
    (scored on `test_set` when given), named, and the others with why they are skipped, sorted.
    Of two runs with the same configuration and seed the first (by path) is kept."""
    dirs = {p.parent for p in sweep_dir.rglob("metrics.json")}
    dirs |= {p.parent for p in sweep_dir.rglob(".hydra") if p.is_dir()}
    loaded, skipped = [], []
    for run_dir in sorted(dirs):
        run, reason = load_run(run_dir, test_set)
        if run is None:
            skipped.append((run_dir, reason))
        else:
            loaded.append(run)
    name_configurations(loaded)
    runs, kept = [], {}
    for run in loaded:
        first = kept.setdefault((run.configuration, run.seed), run.dir)
        if first == run.dir:
            runs.append(run)
        else:
            skipped.append(
                (run.dir, f"same configuration and seed as {first.relative_to(sweep_dir)}")
            )
    for run_dir, reason in skipped:
        log.warning("skipping %s: %s", run_dir, reason)
    return runs, sorted(skipped)


def load_run(run_dir: Path, test_set: str | None) -> tuple[Run | None, str]:
    """The run, its record in today's run format, or None and why it cannot be reported."""
    path = run_dir / "metrics.json"
    if not path.is_file():
        return None, "no metrics.json (failed or unfinished)"
    try:
        metrics = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        return None, f"metrics.json is not valid JSON ({error})"
    record = metrics
    if "config" not in metrics:  # run formats 1-4 kept it in the checkpoints only
        metrics = with_checkpoint_config(metrics, run_dir / "checkpoints" / "best.pt")
    if "config" not in metrics:
        return None, 'metrics.json has no "config" (nor has checkpoints/best.pt)'
    if not metrics.get("test"):
        return None, "metrics.json has no test score"
    if test_set is not None and test_set not in metrics["test"]:
        return None, f"metrics.json has no {test_set} score"
    try:
        return Run(run_dir, upgraded(metrics), record=record), ""
    except UnknownFormat as error:
        return None, str(error)


def with_checkpoint_config(metrics: dict, best: Path) -> dict:
    """`metrics` with the config `best` trained with, where that checkpoint loads."""
    try:
        return metrics | {"config": load_checkpoint(best)["config"]}
    except (CheckpointError, NotFound):
        return metrics


def collected_dir(dest: Path, run: Run) -> Path:
    """Where collect_runs keeps a run: DEST/<protocol>/<configuration>/seed<k>."""
    c = run.configuration
    return dest / c.protocol.name / c.name.replace(" ", ",") / f"seed{run.seed}"


def findings_dir(sweep_dir: Path, runs: Sequence[Run]) -> Path:
    """Where what is read off `runs` goes by default: `sweep_dir`, or the folder above it where
    they are collected runs (scripts/collect_runs.py), beside the folder that holds them."""
    collected = all(run.dir == collected_dir(sweep_dir, run) for run in runs)
    return sweep_dir.parent if collected else sweep_dir
