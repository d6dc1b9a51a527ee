"""Train a model: `python scripts/train.py [group=option] [key=value ...]` (Hydra overrides).

`python scripts/train.py resume=RUN_DIR` continues an interrupted run in its own directory;
`torchrun --nproc_per_node=N scripts/train.py ...` trains data-parallel.
A run directory that already holds a run (a sweep run again, or `hydra.run.dir=DIR`) is not
started over: a finished run (training's record in metrics.json) is skipped, an interrupted one
(step checkpoints) resumed; one command at a time writes into a run directory.
"""

import logging
import shlex
import signal
import sys
from contextlib import nullcontext
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from minimt.allocator import reexec_with_mimalloc
from minimt.atomic import WriteError
from minimt.cli import one_line_errors
from minimt.errors import with_hint
from minimt.locks import writing
from minimt.signals import Terminated, interrupted_line, signal_of
from minimt.sweep_signals import forward_stops, hold_stops, record, remember_stops, stopped

SWEEP_FLAGS = {"-m", "--multirun"}

log = logging.getLogger("minimt")


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
    from minimt.checkpoint import newest_loadable  # loads torch: see __main__

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
    """Train one run in Hydra's output directory; return best val BLEU for sweepers. In a sweep a
    run stopped by a signal returns (its launcher resumes nothing and starts no further run)."""
    run_dir = HydraConfig.get().runtime.output_dir
    if HydraConfig.get().mode == RunMode.MULTIRUN:
        remember_stops()
        if stopped() is not None:
            log.warning("not started: the sweep was stopped (%s)", stopped().name)
            return None
        try:
            return train_one(cfg, run_dir)
        except (KeyboardInterrupt, Terminated) as stop:  # before training or after its last save
            record(signal_of(stop))
            log.warning("%s: %s", run_dir, interrupted_line(stopped()))
            return None
    return train_one(cfg, run_dir)


def train_one(cfg: DictConfig, run_dir: str) -> float | None:
    """Train (or skip, or resume) the run in `run_dir`, which this command holds meanwhile
    (minimt.locks); its best val BLEU."""
    from minimt.train.distributed import launched_as_main  # loads torch: see __main__

    with writing(run_dir) if launched_as_main() else nullcontext():
        return train_held(cfg, run_dir)


def train_held(cfg: DictConfig, run_dir: str) -> float | None:
    """train_one's work, the run held."""
    # These load torch: see __main__.
    from minimt.rundir import finished_run, interrupted_run
    from minimt.study.views import study_hooks
    from minimt.train.loop import Interrupted, train

    sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        if cfg.resume is None:
            finished = finished_run(run_dir, cfg)
            if finished is not None:
                log.info("skipped: %s already finished (metrics.json)", run_dir)
                return finished.get("best_val_bleu")
            if interrupted_run(run_dir):
                cfg.resume = run_dir
        choices = RecordChoices(dict(HydraConfig.get().runtime.choices))
        # a full disk: say where the run can continue from
        with with_hint(lambda: how_to_resume(run_dir), WriteError):
            metrics = train(cfg, run_dir, [*study_hooks(cfg), choices], stopped if sweep else None)
    except Interrupted as interrupted:
        log.warning("%s:\n  %s", interrupted, resume_command(run_dir))
        if sweep:
            record(interrupted.signum or signal.SIGTERM)  # this worker starts no further run
            return None  # not SystemExit: a parallel launcher would kill the other runs mid-save
        sys.exit(0)
    if metrics is None:  # not rank 0 of a torchrun job
        return None
    log.info("run directory: %s", run_dir)
    return metrics["best_val_bleu"]


def sweep_main() -> None:
    """A sweep (-m): a stop signal to this process is sent on to the runs it started, which save
    and return; then this process says how to resume and exits 0, as a stopped single run does."""
    with forward_stops():
        main()
    if stopped() is not None:
        print(
            f"sweep stopped ({stopped().name}): each run it started saved its checkpoint; run "
            "the same command again to resume it",
            file=sys.stderr,
        )


if __name__ == "__main__":
    # First, before anything loads torch: a process picks its allocator when it starts, and a
    # sweep's launcher holds the stop signals before torch starts a thread they could end it in.
    one_line_errors(reexec_with_mimalloc)()  # a Ctrl-C this early is one line too
    sweep = bool(SWEEP_FLAGS & set(sys.argv))
    if sweep:
        hold_stops()
    from minimt.config import register_resolvers  # loads torch

    register_resolvers()  # the configs' ${minimt.*} interpolations, before Hydra composes them
    sweep_main() if sweep else main()
