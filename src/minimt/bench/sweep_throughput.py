"""Training throughput of a sweep whose runs share one machine: target tokens/s summed over the
runs that train at once, for each way of launching them.

Each setting runs `jobs` training runs at once through hydra/launcher=parallel (seeds 1..jobs,
each for `minutes` of training), one setting after the other; a run's rate is its metrics.json
tgt_tokens / train_seconds, and a setting's throughput is the sum over its runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Setting:
    """`jobs` runs at once; `threads` torch threads each (None: the launcher's split)."""

    jobs: int
    threads: int | None = None

    @property
    def name(self) -> str:
        split = "cores // jobs" if self.threads is None else f"{self.threads} each"
        return f"{self.jobs} job{'s' if self.jobs > 1 else ''}, threads {split}"

    @property
    def slug(self) -> str:
        return f"jobs{self.jobs}" + ("" if self.threads is None else f"_threads{self.threads}")


def sweep_command(setting: Setting, minutes: float, out: Path, overrides: list[str]) -> list[str]:
    """scripts/train.py -m running the setting's runs at once into out/<slug>/seed<k>."""
    seeds = ",".join(str(seed) for seed in range(1, setting.jobs + 1))
    command = [
        sys.executable,
        str(REPO / "scripts" / "train.py"),
        "-m",
        "hydra/launcher=parallel",
        f"hydra.launcher.n_jobs={setting.jobs}",
        f"trainer.seed={seeds}",
        f"trainer.max_minutes={minutes}",
        f"hydra.sweep.dir={out / setting.slug}",
        "hydra.sweep.subdir=seed${trainer.seed}",
        *overrides,
    ]
    if setting.threads is not None:
        command.append(f"trainer.num_threads={setting.threads}")
    return command


def run_rates(sweep_dir: Path) -> list[float]:
    """Target tokens/s of each finished run under sweep_dir (metrics.json)."""
    rates = []
    for path in sorted(sweep_dir.glob("*/metrics.json")):
        metrics = json.loads(path.read_text())
        rates.append(metrics["tgt_tokens"] / metrics["train_seconds"])
    return rates


def summarize(rates: dict[str, list[float]]) -> dict[str, dict]:
    """Per setting: its runs' tokens/s, their sum, and the sum over the first setting's sum."""
    first = sum(next(iter(rates.values())))
    return {
        name: {
            "runs_tokens_per_s": found,
            "total_tokens_per_s": sum(found),
            "vs_first": sum(found) / first,
        }
        for name, found in rates.items()
    }


def measure(settings: list[Setting], minutes: float, out: Path, overrides: list[str]) -> dict:
    """Run each setting's sweep in turn and summarize (writes out/sweep_throughput.json)."""
    rates = {}
    for setting in settings:
        subprocess.run(sweep_command(setting, minutes, out, overrides), check=True)
        rates[setting.name] = run_rates(out / setting.slug)
    report = {"minutes": minutes, "overrides": overrides, "settings": summarize(rates)}
    (out / "sweep_throughput.json").write_text(json.dumps(report, indent=2))
    return report
