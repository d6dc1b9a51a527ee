"""Train a model: `python scripts/train.py [group=option] [key=value ...]` (Hydra overrides).

`python scripts/train.py resume=RUN_DIR` continues an interrupted run in its own directory;
`torchrun --nproc_per_node=N scripts/train.py ...` trains data-parallel.
A run directory that already holds a run (a sweep run again, or `hydra.run.dir=DIR`) is not
started over: a finished run (metrics.json) is skipped, an interrupted one (step checkpoints)
resumed.
"""

from minimt.allocator import reexec_with_mimalloc
from minimt.cli import one_line_errors

if __name__ == "__main__":  # first: a process picks its allocator when it starts, before torch
    one_line_errors(reexec_with_mimalloc)()  # a Ctrl-C this early is one line too

import logging
import shlex
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from minimt.atomic import WriteError
from minimt.checkpoint import newest_loadable
from minimt.config import register_resolvers
from minimt.rundir import finished_run, interrupted_run
from minimt.study.views import study_hooks
from minimt.train.loop import Interrupted, train

log = logging.getLogger("minimt")

register_resolvers()


def resume_command(run_dir: str) -> str:
    """This run's command line with resume=RUN_DIR in place of any resume / run-dir override;
    for a sweep job: run the sweep's command again."""
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        return "run the same sweep command again: it resumes this run and skips finished ones"
    kept = [
        o
        for o in HydraConfig.get().overrides.task
        if not o.startswith(("resume=", "hydra.run.dir="))
    ]
    return shlex.join(["python", "scripts/train.py", *kept, f"resume={run_dir}"])


def how_to_resume(run_dir: str) -> str:
    """After a failed write: the newest step checkpoint that loads, and the command that
    continues from it."""
    newest = newest_loadable(Path(run_dir) / "checkpoints")
    if newest is None:
        return "no step checkpoint was saved yet: free space, then start the run again"
    return (
        f"the newest complete checkpoint is {newest}: free space, then resume: "
        f"{resume_command(run_dir)}"
    )


class RecordChoices:
    """Writes the config groups' choices (experiment, arm, pe, ...) to metrics.json "choices", so
    that a run names the study arm it trained."""

    def __init__(self, choices: dict[str, str | None]):
        self.choices = {group: choice for group, choice in choices.items() if "hydra" not in group}

    def on_validation(self, run, step: int) -> None:
        pass

    def on_finish(self, run, metrics: dict) -> None:
        metrics["choices"] = self.choices


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
@one_line_errors
def main(cfg: DictConfig) -> float | None:
    """Train one run in Hydra's output directory; return best val BLEU for sweepers."""
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        if cfg.resume is None:
            finished = finished_run(run_dir, cfg)
            if finished is not None:
                log.info("skipped: %s already finished (metrics.json)", run_dir)
                return finished.get("best_val_bleu")
            if interrupted_run(run_dir):
                cfg.resume = run_dir
        choices = RecordChoices(dict(HydraConfig.get().runtime.choices))
        metrics = train(cfg, run_dir, [*study_hooks(cfg), choices])
    except Interrupted as stopped:
        log.warning("%s:\n  %s", stopped, resume_command(run_dir))
        sys.exit(0)
    except WriteError as error:  # a full disk: say where the run can continue from
        raise WriteError(f"{error}; {how_to_resume(run_dir)}") from error
    if metrics is None:  # not rank 0 of a torchrun job
        return None
    log.info("run directory: %s", run_dir)
    return metrics["best_val_bleu"]


if __name__ == "__main__":
    main()
