"""The plan's looks answered from runs: a family is tested only with all its planned seeds, Holm
over its fixed size; an interaction is the per-seed difference of two differences; the init
ratio of a run that did not record it is the one its config gives."""

from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from minimt.config import build_model
from minimt.study.questions import PLAN, answer_plan
from minimt.study.runs import Run, init_ratio
from minimt.study.sections import plan_table
from minimt.study.significance import holm, paired_difference
from tests.helpers import compose_config

TEST_SET = "test_2016_flickr"


def run(arm: str, seed: int, bleu: float, experiment: str = "study_cpu") -> Run:
    cfg = compose_config(f"experiment={experiment}", f"arm={arm}", f"trainer.seed={seed}")
    metrics = {
        "config": OmegaConf.to_container(cfg, resolve=True),
        "choices": {"experiment": experiment, "arm": arm},
        "test": {TEST_SET: {"bleu": bleu}},
        "precision": "fp32",
        "device": "cpu",
    }
    return Run(Path(f"{arm}/seed{seed}"), metrics)


def scores(arm: str, seeds, base: float, step: float) -> list[Run]:
    return [run(arm, s, base + step * s) for s in seeds]


def results_of(question: str, look: int, runs) -> list:
    return [r for r in answer_plan(runs) if (r.look.question, r.look.look) == (question, look)]


def test_a_family_is_tested_only_once_every_test_has_its_planned_seeds():
    seeds = (1, 2, 3)
    runs = scores("full_sinusoidal", seeds, 39, 0.1) + scores("full_learned", seeds, 37, 0.3)
    partial = results_of("Q1", 1, runs)
    assert [r.holm_p for r in partial] == [None, None]  # full_rope has not run
    assert partial[0].difference.mean == pytest.approx(-2 + 0.2 * 2)
    assert "waiting: 0 of 3" in partial[1].verdict

    complete = results_of("Q1", 1, runs + scores("full_rope", seeds, 40, -0.2))
    p = [r.difference.p_value for r in complete]
    assert [r.holm_p for r in complete] == pytest.approx(holm(p))
    assert len(complete[0].look.tests) == 2  # m fixed by the plan


def test_the_interaction_is_the_per_seed_difference_of_differences_on_new_seeds_only():
    new = (4, 5, 6, 7, 8)
    runs = (
        scores("full_sinusoidal", (1, *new), 39, 0.1)
        + scores("unscaled_sinusoidal", (1, *new), 37, 0.05)
        + scores("full_learned", (1, *new), 37, 0.2)
        + scores("unscaled_learned", (1, *new), 38, 0.4)
    )
    (result,) = results_of("Q2x", 1, runs)
    assert result.seeds == list(new)
    sinusoidal = [(37 + 0.05 * s) - (39 + 0.1 * s) for s in new]
    learned = [(38 + 0.4 * s) - (37 + 0.2 * s) for s in new]
    expected = paired_difference(sinusoidal, learned)
    assert result.difference.mean == pytest.approx(expected.mean)
    assert result.holm_p == pytest.approx(expected.p_value)  # a family of one
    assert "(unscaled_learned - full_learned)" in plan_table([result])


def test_runs_of_another_protocol_never_enter_the_plan():
    runs = [run("full_sinusoidal", s, 39, experiment="study") for s in (1, 2, 3)]
    assert all(r.seeds == [] for r in answer_plan(runs))
    assert sum(len(look.tests) for look in PLAN) == len(answer_plan(runs))


@pytest.mark.parametrize("arm", ["full_sinusoidal", "fairseq_learned", "unscaled_small_sinusoidal"])
def test_the_ratio_a_config_gives_is_the_one_a_model_built_from_it_measures(arm):
    unrecorded = run(arm, 1, 30.0)
    cfg = unrecorded.config
    torch.manual_seed(0)  # one fixed draw: the test cannot flicker
    model = build_model(cfg, 8000, 8000)
    measured = model.embedding.input_magnitudes(cfg.data.max_train_len + 1)["src"]["ratio"]
    assert init_ratio(unrecorded) == pytest.approx(measured, rel=0.02)  # 8,000 x 128 draws
    recorded = Run(
        unrecorded.dir,
        {**unrecorded.metrics, "input_magnitudes": {"init": {"src": {"ratio": 2.5}}}},
    )
    assert init_ratio(recorded) == 2.5
