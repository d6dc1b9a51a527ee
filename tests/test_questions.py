"""The study's questions name configurations the sweeps run, and each run's protocol is the
experiment config and precision it trained with."""

import pytest

from minimt.study.questions import (
    FIRST_SEEDS,
    PLAN,
    QUESTIONS,
    Contrast,
    Interaction,
    exploratory,
    planned_alpha,
)
from minimt.study.runs import AS_CONFIGURED, configuration_of, protocol_of
from tests.helpers import REPO, compose_config


def test_every_compared_configuration_is_an_arm_of_the_sweeps():
    arms = sorted(path.stem for path in (REPO / "configs" / "arm").glob("*.yaml"))
    slugs = {configuration_of(compose_config(f"arm={arm}")).local_slug for arm in arms}
    compared = {s for q in QUESTIONS for c in q.contrasts for s in (c.system, c.reference)}
    assert compared <= slugs
    assert [q.key for q in QUESTIONS] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert len(QUESTIONS[1].contrasts) == 15  # the 2x2 and its diagonal for three encodings


@pytest.mark.parametrize(
    ("experiment", "precision", "name", "prefix"),
    [
        ("study", "bf16", "study", ""),
        ("study_cpu", "fp32", "study_cpu", "cpu"),
        ("study_cpu", "bf16", "study_cpu_bf16", "study_cpu_bf16"),  # never paired with fp32
        ("study", "fp32", "study_fp32", "study_fp32"),
    ],
)
def test_a_runs_protocol_is_its_experiment_and_precision(experiment, precision, name, prefix):
    cfg = compose_config(f"experiment={experiment}", "arm=full_rope", "trainer.seed=4")
    protocol = protocol_of(cfg, precision)
    assert (protocol.name, protocol.slug_prefix) == (name, prefix)
    slug = configuration_of(cfg, precision).slug
    assert slug == (f"{prefix}-full-rope" if prefix else "full-rope")


def test_a_run_on_another_kind_of_device_is_its_own_protocol():
    cfg = compose_config("experiment=study")
    assert protocol_of(cfg, "bf16", "NVIDIA H100 80GB HBM3").name == "study"
    assert protocol_of(cfg, "bf16", None).name == "study"  # saved before the device was recorded
    on_cpu = protocol_of(cfg, "bf16", "cpu")
    assert (on_cpu.name, on_cpu.slug_prefix) == ("study_bf16_cpu", "study_bf16_cpu")


def test_runs_of_no_declared_experiment_are_grouped_as_configured():
    assert protocol_of(compose_config("experiment=smoke"), "fp32") == AS_CONFIGURED
    changed = compose_config("experiment=study_cpu", "trainer.lr=1e-3")
    assert protocol_of(changed, "fp32") == AS_CONFIGURED


def test_the_plan_names_arms_that_exist_and_fixes_each_family_before_its_runs():
    arms = {path.stem for path in (REPO / "configs" / "arm").glob("*.yaml")}
    for look in PLAN:
        assert look.tests, f"{look.question} look {look.look} tests nothing"
        for test in look.tests:
            comparison = test.comparison
            contrasts = (
                (comparison.first, comparison.second)
                if isinstance(comparison, Interaction)
                else (comparison,)
            )
            assert {arm for c in contrasts for arm in (c.system, c.reference)} <= arms
            assert len(test.seeds) == len(set(test.seeds)) >= 3


def test_the_plan_spends_at_most_the_family_wise_alpha_of_each_question_over_its_looks():
    spent: dict[str, float] = {}
    for look in PLAN:
        spent[look.question] = spent.get(look.question, 0.0) + look.alpha
    assert spent == pytest.approx({"Q1": 0.025, "Q2": 0.05, "Q2x": 0.05, "Q6": 0.05})
    # Q1's second look has nothing left that new seeds can settle: its 0.025 stays unspent.


def test_the_second_look_tests_only_what_the_first_left_open_and_on_more_seeds():
    def tests_of(question: str, number: int) -> list:
        return [
            t
            for look in PLAN
            if (look.question, look.look) == (question, number)
            for t in look.tests
        ]

    first = {test.comparison: test.seeds for test in tests_of("Q2", 1)}
    second = tests_of("Q2", 2)
    called_at_look_1 = {
        Contrast("init1_sinusoidal", "full_sinusoidal"),
        Contrast("unscaled_init1_sinusoidal", "init1_sinusoidal"),
    }
    for test in second:
        assert test.comparison in first and test.comparison not in called_at_look_1
        assert set(first[test.comparison]) < set(test.seeds)


def test_the_interaction_is_tested_on_new_seeds_only():
    (q2x,) = [look for look in PLAN if look.question == "Q2x"]
    (test,) = q2x.tests
    assert not set(test.seeds) & set(FIRST_SEEDS)
    assert isinstance(test.comparison, Interaction)
    assert test.comparison.first.reference == "full_learned"
    assert test.comparison.second.reference == "full_sinusoidal"


def test_the_report_spends_the_plans_alpha_per_look_and_marks_protocols_planned_late():
    assert planned_alpha("study_cpu", "Q1") == planned_alpha("study_cpu", "Q2") == 0.025
    assert planned_alpha("study_cpu", "Q3") is None  # not in the plan: the report's alpha
    assert planned_alpha("study", "Q2") is None  # the plan is study_cpu's only
    assert exploratory("study") == "plan written after the data"
    assert exploratory("study_cpu") == exploratory("study_fp32") == ""
