"""The study runs an agenda still lacks, in its order: what a GPU call should train next.

    python scripts/gpu/agenda.py agenda=scripts/gpu/study_agenda.txt results=/tmp/minimt_gpu/runs

An agenda line is `sweep arm seed [override ...]` (configs/arm/<arm>.yaml; `#` starts a comment).
A line is left out when its run is done: collected into `collected` (docs/study/runs, where
scripts/gpu/unpack.py puts a call's runs; found through the study's own collected_dir) and not
stopped by trainer.max_minutes (the study wants runs that converged), or finished (metrics.json)
in `results`/<sweep>/<arm>/seed<k>. Prints the other lines.
"""

import json
import sys
from pathlib import Path

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from minimt.cli import one_line_errors, parse_args
from minimt.config import register_resolvers
from minimt.runtime import pick_device, resolve_precision
from minimt.study.collect import collected_dir
from minimt.study.runs import Run

REPO = Path(__file__).resolve().parents[2]
DEFAULTS = {
    "agenda": "scripts/gpu/study_agenda.txt",
    "collected": "docs/study/runs",
    "results": "/tmp/minimt_gpu/runs",
    "experiment": "study",
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
CAPPED = "trainer.max_minutes"  # the stop_reason of a run its time cap ended


def composed_run(line: list[str], experiment: str) -> Run:
    """The run of an agenda line as collect_runs sees it, finished: its config composed as
    train.py composes it, in the precision this machine trains in."""
    _, arm, seed, *overrides = line
    cfg = compose(
        "config",
        overrides=[f"experiment={experiment}", f"arm={arm}", f"trainer.seed={seed}", *overrides],
    )
    precision = resolve_precision(cfg.trainer.precision, pick_device(cfg.trainer.device))
    return Run(
        Path(), {"config": OmegaConf.to_container(cfg, resolve=True), "precision": precision}
    )


def is_done(line: list[str], run: Run, args) -> bool:
    sweep, arm, seed = line[:3]
    if (Path(args.results) / sweep / arm / f"seed{seed}" / "metrics.json").is_file():
        return True
    metrics = collected_dir(Path(args.collected), run) / "metrics.json"
    return metrics.is_file() and not json.loads(metrics.read_text())["stop_reason"].startswith(
        CAPPED
    )


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    register_resolvers()
    agenda = Path(args.agenda).read_text().splitlines()
    lines = [words for text in agenda if (words := text.split("#")[0].split())]
    # composed first: the study's protocol_of composes configs of its own, after
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        runs = [composed_run(line, args.experiment) for line in lines]
    for line, run in zip(lines, runs, strict=True):
        if not is_done(line, run, args):
            print(" ".join(line))


if __name__ == "__main__":
    main(sys.argv[1:])
