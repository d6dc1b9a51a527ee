"""A recipe that follows the run's budget (trainer.adapt).

A higher dropout and an average of the last checkpoints pay where a run makes enough updates and
cost BLEU where it makes few (docs/results.md). With trainer.adapt, the first validation at or
after warm-up projects the updates the run's budget will hold: exact under trainer.max_steps and
trainer.max_epochs, from the measured seconds per update and per validation under
trainer.max_minutes. A run projected to reach trainer.adapt_min_updates trains on with
trainer.adapt_dropout, keeps the step checkpoints of its last trainer.adapt_average of the
updates, and at its end the test sets score whichever of best.pt and their average has the
higher validation BLEU. The decision is logged, saved in every checkpoint (a resumed run keeps
it) and written to metrics.json under "recipe".
"""

from __future__ import annotations

import logging
import math
from dataclasses import asdict, dataclass

from omegaconf import DictConfig
from torch import nn

from minimt.checkpoint import averaged_from
from minimt.train.distributed import Distributed
from minimt.train.state import Clock, TrainState

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Projection:
    """The updates a run's budget holds, seen at update `step`, and the budget that binds."""

    step: int
    updates: int
    limit: str  # trainer.max_steps | trainer.max_epochs | trainer.max_minutes
    seconds_per_update: float  # training only, measured since the rate's first update
    validation_seconds: float  # the validation at `step`


def projected_updates(
    trainer: DictConfig,
    step: int,
    elapsed: float,
    steps_per_epoch: int,
    seconds_per_update: float,
    validation_seconds: float,
) -> Projection:
    """The fewest updates any budget allows: trainer.max_steps; trainer.max_epochs x
    `steps_per_epoch`; and `step` plus the whole updates the minutes left after `elapsed`
    seconds hold at `seconds_per_update`, each trainer.val_every of them paying one validation
    of `validation_seconds`."""
    per_update = seconds_per_update + validation_seconds / trainer.val_every
    seconds_left = max(trainer.max_minutes * 60 - elapsed, 0.0)
    budgets = {
        "trainer.max_steps": trainer.max_steps,
        "trainer.max_epochs": trainer.max_epochs * steps_per_epoch,
        "trainer.max_minutes": step + math.floor(seconds_left / per_update),
    }
    limit = min(budgets, key=budgets.__getitem__)  # the first of equal ones
    return Projection(step, budgets[limit], limit, seconds_per_update, validation_seconds)


def choose(projection: Projection, trainer: DictConfig, dropout: float) -> dict:
    """The recipe for a run that will make `projection.updates` updates, with its reasons;
    `dropout` is the run's model.dropout."""
    adapted = projection.updates >= trainer.adapt_min_updates
    return {
        **asdict(projection),
        "min_updates": trainer.adapt_min_updates,
        "adapted": adapted,
        "dropout": trainer.adapt_dropout if adapted else dropout,
        "average": trainer.adapt_average,
        "average_from": averaged_from(projection.updates, trainer.adapt_average)
        if adapted
        else None,
    }


def set_dropout(model: nn.Module, p: float) -> None:
    """Every nn.Dropout of `model` (the embeddings' and the residual branches', model.dropout's;
    model.attention_dropout is no module and stays) drops with probability `p` from now on."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = p


def describe(recipe: dict) -> str:
    """One line saying what a run chose and why."""
    seen = (
        f"at update {recipe['step']}, {recipe['updates']} updates projected "
        f"({recipe['limit']} binds; {recipe['seconds_per_update']:.3f} s per update, "
        f"{recipe['validation_seconds']:.1f} s per validation)"
    )
    if not recipe["adapted"]:
        return f"recipe kept: {seen}, below trainer.adapt_min_updates={recipe['min_updates']}"
    return (
        f"recipe adapted: {seen}, at least trainer.adapt_min_updates={recipe['min_updates']}: "
        f"dropout {recipe['dropout']} from here, the step checkpoints from update "
        f"{recipe['average_from']} on kept for their average"
    )


class RecipeAdapter:
    """Measures the seconds per update from the middle of warm-up (or, in a run resumed past
    it, from the session's first update) and decides once, at the first validation at or after
    trainer.warmup_steps; a resumed run's saved decision is applied again at once."""

    def __init__(self, cfg: DictConfig, state: TrainState, model: nn.Module, steps_per_epoch: int):
        self.cfg, self.steps_per_epoch = cfg, steps_per_epoch
        self.first_step = max(cfg.trainer.warmup_steps // 2, state.step + 1)
        self.first_seconds: float | None = None
        self.validations_total = 0.0  # seconds of rank 0's validations since first_step
        self.last_validation = 0.0  # the seconds of rank 0's last one
        if state.recipe.get("adapted"):
            set_dropout(model, state.recipe["dropout"])
            if not cfg.trainer.adapt:
                log.warning(
                    "the run adapted its recipe at update %d: it keeps it (trainer.adapt=false "
                    "does not undo a decision taken)",
                    state.recipe["step"],
                )

    def after_step(
        self, state: TrainState, clock: Clock, model: nn.Module, dist: Distributed
    ) -> None:
        """Every process, after each update and its validation: the rate's start, the seconds of
        the validation (rank 0's val_history has its start), the decision when it is due (rank 0
        decides, every process applies it)."""
        trainer = self.cfg.trainer
        if not trainer.adapt or state.recipe:
            return
        history = state.val_history
        if history and history[-1]["step"] == state.step:
            self.last_validation = clock.elapsed() - history[-1]["seconds"]
            self.validations_total += self.last_validation
        if state.step == self.first_step:
            self.first_seconds, self.validations_total = clock.elapsed(), 0.0
        due = state.step >= trainer.warmup_steps and state.step % trainer.val_every == 0
        if not due or state.step <= self.first_step:
            return
        recipe = self.decide(state.step, clock.elapsed()) if dist.is_main else None
        state.recipe = dist.broadcast(recipe)
        log.info(describe(state.recipe))
        if state.recipe["adapted"]:
            set_dropout(model, state.recipe["dropout"])

    def decide(self, step: int, elapsed: float) -> dict:
        """Rank 0's recipe at `step`, `elapsed` training seconds in, just after a validation."""
        training = elapsed - self.first_seconds - self.validations_total
        projection = projected_updates(
            self.cfg.trainer,
            step,
            elapsed,
            self.steps_per_epoch,
            training / (step - self.first_step),
            self.last_validation,
        )
        return choose(projection, self.cfg.trainer, self.cfg.model.dropout)
