"""Sweep throughput on this machine: 1 run alone, 2 runs splitting the cores, 2 runs each taking
every core (what a parallel sweep did before the split), target tokens/s summed over the runs.

    python scripts/bench/sweep_throughput.py out=outputs/sweep_throughput minutes=3
    python scripts/bench/sweep_throughput.py overrides='[experiment=smoke]' minutes=1

Each setting runs `jobs` training runs at once through hydra/launcher=parallel (seeds 1..jobs,
each for `minutes` of training), one setting after the other; a run's rate is its metrics.json
tgt_tokens / train_seconds, and a setting's throughput is the sum over its runs. `overrides`
(default: a 50-pair validation and greedy test decoding) go to every run. Writes
OUT/sweep_throughput.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from minimt.cli import one_line_errors, parse_args

TRAIN = Path(__file__).resolve().parents[1] / "train.py"
# one small validation and greedy test decoding, so that the runs' clocks time training
QUICK_END = ["data.max_val_pairs=50", "decoding.test_beam=1"]
DEFAULTS = {"out": "outputs/sweep_throughput", "minutes": 3.0, "overrides": QUICK_END}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


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
        str(TRAIN),
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


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    cores = len(os.sched_getaffinity(0))
    settings = [Setting(1), Setting(2), Setting(2, threads=cores)]
    report = measure(settings, args.minutes, Path(args.out), list(args.overrides))
    print("setting | target tokens/s per run | total | vs 1 job")
    for name, found in report["settings"].items():
        runs = ", ".join(f"{rate:,.0f}" for rate in found["runs_tokens_per_s"])
        print(f"{name} | {runs} | {found['total_tokens_per_s']:,.0f} | {found['vs_first']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
