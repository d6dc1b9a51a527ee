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

from minimt.data.length_split import LONG_PREFIX
from minimt.model.positions import sinusoidal_table

log = logging.getLogger(__name__)

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
    """A finished run: its directory and metrics.json (with the resolved config in "config")."""

    dir: Path
    metrics: dict
    name: str = ""  # its configuration's name, set by load_sweep; "" reads as its arm

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
        return self.config.trainer.seed

    @property
    def machine(self) -> str:
        """What it trained on: the account docs/study.md gives of its run group
        (RECORDED_MACHINES) where metrics.json "provenance" names no machine or only the start of
        that account's name (a CPU's model name without its family, model and kernels), else
        the machine "provenance" names, the GPU's name "device" gives, or "unrecorded"."""
        recorded = self.metrics.get("provenance", {}).get("machine")
        protocol = protocol_of(self.metrics).name
        for (name, arms, seeds), machine in RECORDED_MACHINES.items():
            in_group = (
                protocol == name and (arms is None or self.arm in arms) and self.seed in seeds
            )
            if in_group and (not recorded or machine.startswith(recorded)):
                return machine
        if recorded:
            return recorded
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


EPYC, XEON = "AMD EPYC", "Intel Xeon (family 6, model 207)"
# Q7's runs trained from a commit whose records named a CPU by its model name alone.
Q7_ARMS = ("full_sinusoidal", "sinusoid_rms_learned")
Q7_FIRST_EPYC = "AMD EPYC (family 25, model 1; torch's AVX2 kernels)"
Q7_SECOND_EPYC = "AMD EPYC (family 26, model 2; torch's AVX2 kernels, ATEN_CPU_CAPABILITY=avx2)"
SCALING_ARMS = (  # sweep=scaling_cpu's
    *("full_sinusoidal", "unscaled_sinusoidal", "init1_sinusoidal", "unscaled_init1_sinusoidal"),
    *("full_learned", "unscaled_learned", "full_rope", "unscaled_rope"),
)
# The CPU runs recorded before metrics.json had "provenance", or whose "provenance" names the CPU's
# model alone, by docs/study.md's account of where each group ran:
# (protocol, arms or None for every arm, seeds) -> machine.
RECORDED_MACHINES: dict[tuple[str, tuple[str, ...] | None, tuple[int, ...]], str] = {
    ("study", None, (1, 2, 3)): "NVIDIA H100",
    ("study_cpu", SCALING_ARMS, (1, 2, 3)): EPYC,
    ("study_cpu", ("fairseq_learned", "sinusoid_rms_learned"), (1, 2, 3, 4, 5)): EPYC,
    ("study_cpu", ("full_sinusoidal", "unscaled_sinusoidal"), (4, 5, 6, 7, 8)): XEON,
    ("study_cpu", ("full_learned", "unscaled_learned"), (4, 5, 6, 7, 8)): XEON,
    ("study_cpu", ("unscaled_small_sinusoidal",), (1, 2, 3, 4, 5)): XEON,
    ("study_cpu", ("init1_sinusoidal", "unscaled_init1_sinusoidal"), (4, 5)): XEON,
    ("study_cpu", Q7_ARMS, tuple(range(9, 19))): Q7_FIRST_EPYC,
    ("study_cpu", Q7_ARMS, (19, 20)): Q7_SECOND_EPYC,
}


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
    """Where collect_runs keeps a run: DEST/<protocol>/<configuration>/seed<k>."""
    c = run.configuration
    return dest / c.protocol.name / c.name.replace(" ", ",") / f"seed{run.seed}"
