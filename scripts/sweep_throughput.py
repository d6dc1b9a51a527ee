"""Sweep throughput on this machine: 1 run alone, 2 runs splitting the cores, 2 runs each taking
every core (what a parallel sweep did before the split), target tokens/s summed over the runs.

    python scripts/sweep_throughput.py out=outputs/sweep_throughput minutes=3
    python scripts/sweep_throughput.py overrides='[experiment=smoke]' minutes=1

`overrides` (default: a 50-pair validation and greedy test decoding) go to every run.

The body is minimt.bench.sweep_throughput.
"""

import os
import sys
from pathlib import Path

from minimt.bench.sweep_throughput import Setting, measure
from minimt.cli import one_line_errors, parse_args

# one small validation and greedy test decoding, so that the runs' clocks time training
QUICK_END = ["data.max_val_pairs=50", "decoding.test_beam=1"]
DEFAULTS = {"out": "outputs/sweep_throughput", "minutes": 3.0, "overrides": QUICK_END}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


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
