"""trainer.adapt: the projection of a run's updates, the decision, the dropout it sets, the
checkpoints it keeps and averages, and the checkpoint the test sets score."""

import json
import math

import pytest
from omegaconf import DictConfig, OmegaConf
from torch import nn

from minimt.checkpoint import averaged_from, remove_old_checkpoints, step_checkpoints
from minimt.config import ConfigError, validate_config
from minimt.train.adapt import RecipeAdapter, choose, projected_updates, set_dropout
from minimt.train.distributed import Distributed
from minimt.train.loop import train
from minimt.train.state import TrainState, averaged_window
from tests.helpers import compose_config, tiny_transformer, toy_run_overrides

TRAINER = {
    "max_steps": 100_000,
    "max_epochs": 1000,
    "max_minutes": 10.0,
    "val_every": 100,
    "warmup_steps": 4,
    "adapt": True,
    "adapt_min_updates": 30,
    "adapt_dropout": 0.2,
    "adapt_average": 0.2,
}


def trainer(**overrides) -> DictConfig:
    return OmegaConf.create(TRAINER | overrides)


def test_under_max_minutes_the_projection_counts_the_updates_the_minutes_left_hold():
    # 600 s budget, 120 s in at update 500; 0.5 s an update plus a 10 s validation per 100
    projection = projected_updates(trainer(), 500, 120.0, 400, 0.5, 10.0)
    assert projection.limit == "trainer.max_minutes"
    assert projection.updates == 500 + math.floor(480 / 0.6) == 1300


@pytest.mark.parametrize(
    ("overrides", "limit", "updates"),
    [
        ({"max_steps": 900}, "trainer.max_steps", 900),
        ({"max_epochs": 2}, "trainer.max_epochs", 800),
        ({"max_minutes": 1.0}, "trainer.max_minutes", 500),  # past the budget: no update more
    ],
)
def test_the_budget_that_binds_gives_the_projection(overrides, limit, updates):
    projection = projected_updates(trainer(**overrides), 500, 120.0, 400, 0.5, 10.0)
    assert (projection.limit, projection.updates) == (limit, updates)


@pytest.mark.parametrize(
    ("updates", "share", "first"),
    [(2400, 0.2, 1920), (34, 0.2, 28), (10, 1.0, 1), (5, 0.01, 5), (1000, 0.7, 300)],
)
def test_the_averaging_window_is_the_last_share_of_the_updates(updates, share, first):
    assert averaged_from(updates, share) == first


def test_a_run_projected_to_reach_the_minimum_adapts_and_one_below_keeps_its_recipe():
    reached = choose(
        projected_updates(trainer(max_steps=30), 10, 0.0, 400, 1.0, 1.0), trainer(), 0.1
    )
    assert reached["adapted"] and reached["dropout"] == 0.2 and reached["average_from"] == 24
    below = choose(projected_updates(trainer(max_steps=29), 10, 0.0, 400, 1.0, 1.0), trainer(), 0.1)
    assert not below["adapted"] and below["dropout"] == 0.1 and below["average_from"] is None
    assert below["updates"] == 29 and below["min_updates"] == 30


def test_set_dropout_reaches_every_dropout_of_the_model():
    model = tiny_transformer(40)
    dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]
    assert len(dropouts) > 1
    set_dropout(model, 0.25)
    assert {m.p for m in dropouts} == {0.25}


class ScriptedClock:
    """A Clock whose elapsed() gives the seconds a test sets."""

    seconds = 0.0

    def elapsed(self) -> float:
        return self.seconds


def test_the_rate_is_measured_from_mid_warm_up_without_the_validations():
    cfg = OmegaConf.create({"trainer": trainer(max_minutes=1.0, warmup_steps=8, val_every=2)})
    cfg.model = {"dropout": 0.1}
    model, state, clock = tiny_transformer(40), TrainState(), ScriptedClock()
    adapter = RecipeAdapter(cfg, state, model, steps_per_epoch=1000)
    dist = Distributed()
    for step in range(1, 9):  # 1 s an update, a validation of 2 s every 2 updates
        clock.seconds += 1.0
        state.step = step
        if step % 2 == 0:
            state.val_history.append({"step": step, "seconds": clock.seconds})
            clock.seconds += 2.0
        adapter.after_step(state, clock, model, dist)
        assert bool(state.recipe) == (step == 8)  # decided at the first validation after warm-up
    # measured from update 4 (mid warm-up), its validation and update 6's left out; 44 s left
    # at 1 s an update plus 2 s every 2 hold 22 updates more
    assert state.recipe["seconds_per_update"] == 1.0 and state.recipe["validation_seconds"] == 2.0
    assert state.recipe["updates"] == 30 and state.recipe["limit"] == "trainer.max_minutes"
    assert state.recipe["adapted"] and state.recipe["average_from"] == 24
    assert {m.p for m in model.modules() if isinstance(m, nn.Dropout)} == {0.2}
    decided = dict(state.recipe)
    state.step, clock.seconds = 10, 30.0
    state.val_history.append({"step": 10, "seconds": 28.0})
    adapter.after_step(state, clock, model, dist)
    assert state.recipe == decided  # decided once


def test_a_resumed_run_keeps_its_saved_decision_even_with_adapt_off(caplog):
    cfg = OmegaConf.create({"trainer": trainer(adapt=False), "model": {"dropout": 0.1}})
    model = tiny_transformer(40)
    recipe = {"adapted": True, "step": 500, "dropout": 0.3, "average": 0.5, "average_from": 900}
    state = TrainState(step=600, recipe=recipe)
    RecipeAdapter(cfg, state, model, steps_per_epoch=1000)
    assert {m.p for m in model.modules() if isinstance(m, nn.Dropout)} == {0.3}
    assert "adapted its recipe at update 500: it keeps it" in caplog.text


def test_a_run_past_its_projection_keeps_only_the_window_of_the_updates_made():
    recipe = {"adapted": True, "average": 0.5, "average_from": 900}
    assert averaged_window(TrainState(step=1000, recipe=recipe)) == 900
    assert averaged_window(TrainState(step=2400, recipe=recipe)) == 1200
    assert averaged_window(TrainState(step=2400, recipe={"adapted": False})) is None


def test_the_checkpoints_an_adapted_run_will_average_are_kept_besides_the_newest(tmp_path):
    for step in range(10, 101, 10):
        (tmp_path / f"step_{step}.pt").write_bytes(b"")
    remove_old_checkpoints(tmp_path, keep=2, keep_from=50)
    assert [p.name for p in step_checkpoints(tmp_path)] == [
        f"step_{step}.pt" for step in (50, 60, 70, 80, 90, 100)
    ]


def test_adapt_beside_average_last_and_an_empty_window_are_refused():
    with pytest.raises(ConfigError, match="trainer.adapt=true averages .* trainer.average_last=3"):
        validate_config(compose_config("trainer.adapt=true", "trainer.average_last=3"))
    with pytest.raises(ConfigError, match="trainer.adapt_average"):
        validate_config(compose_config("trainer.adapt_average=0"))


@pytest.mark.slow  # two tiny training runs on the toy corpus
@pytest.mark.parametrize("min_updates", [30, 1000])
def test_a_run_records_its_choice_and_scores_the_checkpoint_it_reports(tmp_path, min_updates):
    overrides = toy_run_overrides(
        tmp_path / "data",
        "views=false",
        "trainer.max_steps=40",
        "trainer.warmup_steps=10",
        "trainer.val_every=10",
        "trainer.save_every=10",
        "trainer.keep_checkpoints=1",
        "trainer.average_last=null",
        "trainer.adapt=true",
        f"trainer.adapt_min_updates={min_updates}",
        "trainer.adapt_average=0.5",
    )
    metrics = train(compose_config(*overrides), tmp_path / "run")
    recipe = metrics["recipe"]
    assert recipe["step"] == 10 and recipe["limit"] == "trainer.max_steps"
    assert recipe["updates"] == 40 and recipe["adapted"] == (min_updates == 30)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved["recipe"] == recipe
    (test,) = metrics["test"].values()
    assert test["checkpoint"] == recipe["reported"]
    kept = [p.name for p in step_checkpoints(tmp_path / "run" / "checkpoints")]
    if min_updates == 1000:
        assert recipe["reported"] == "best" and kept == ["step_40.pt"]
        return
    assert kept == ["step_20.pt", "step_30.pt", "step_40.pt"]
    assert recipe["averaged_from"] == kept
    assert recipe["val_bleu"]["best"] == max(v["bleu"] for v in metrics["val_history"])
    better = recipe["val_bleu"]["averaged"] > recipe["val_bleu"]["best"]
    assert recipe["reported"] == ("averaged" if better else "best")
