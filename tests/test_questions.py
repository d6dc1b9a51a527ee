"""The study's questions and plan name arms the sweeps run, and each run's protocol is the
experiment config, precision and kind of device it trained with."""

import pytest

from minimt.data.length_split import POOLED_LONG
from minimt.study.plan import Contrast, Interaction
from minimt.study.runs import DECLARED, Protocol, protocol_of
from tests.helpers import PLANS, REPO

ARMS = {path.stem for path in (REPO / "configs" / "arm").glob("*.yaml")}
QUESTIONS = PLANS.families_of("a protocol no plan names")
PLAN = PLANS.families_of("study_cpu")
FIRST = (1, 2, 3)  # the seeds of study_cpu's first round


def test_every_compared_configuration_is_an_arm_of_the_sweeps():
    compared = {arm for family in QUESTIONS for test in family.tests for arm in test.arms}
    assert compared <= ARMS
    assert [family.question for family in QUESTIONS] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert len(QUESTIONS[1].tests) == 15  # the 2x2 and its diagonal for three encodings
    assert not any(family.planned for family in QUESTIONS)


@pytest.mark.parametrize(
    ("experiment", "precision", "device", "name"),
    [
        ("study", "bf16", "NVIDIA H100 80GB HBM3", "study"),
        ("study", "bf16", "cuda", "study"),
        ("study", "bf16", None, "study_bf16"),  # no device recorded: not the declared one
        ("study_cpu", "fp32", "cpu", "study_cpu"),
        ("study_cpu", "bf16", "cpu", "study_cpu_bf16_cpu"),  # never paired with fp32
        ("study", "bf16", "cpu", "study_bf16_cpu"),  # another kind of device
        ("smoke", "fp32", "cpu", "smoke_fp32_cpu"),
        (None, "fp32", "cpu", "as_configured_fp32_cpu"),
    ],
)
def test_a_runs_protocol_is_its_experiment_precision_and_kind_of_device(
    experiment, precision, device, name
):
    metrics = {"choices": {"experiment": experiment}, "precision": precision, "device": device}
    protocol = protocol_of(metrics)
    assert protocol.name == name
    assert (protocol in DECLARED) == (name in ("study", "study_cpu"))


def test_declared_protocols_say_their_device_in_words_and_come_first():
    assert (
        Protocol("study_cpu", "fp32", "cpu").title == "experiment=study_cpu, fp32 on a 2-core CPU"
    )
    assert Protocol("smoke", "fp32", "cpu").title == "experiment=smoke, fp32 on cpu"
    protocols = [Protocol("a", "fp32", "cpu"), *DECLARED]
    assert sorted(protocols, key=lambda p: p.rank)[-1] == Protocol("a", "fp32", "cpu")


def test_the_plan_names_arms_that_exist_and_fixes_each_family_before_its_runs():
    for family in PLAN:
        assert family.tests, f"{family.question} look {family.look} tests nothing"
        assert family.planned and family.alpha is not None
        for test in family.tests:
            assert set(test.arms) <= ARMS
            assert len(test.seeds) == len(set(test.seeds)) >= 3


def test_the_plan_spends_at_most_the_family_wise_alpha_of_each_question_over_its_looks():
    spent: dict[str, float] = {}
    for family in PLAN:
        spent[family.question] = spent.get(family.question, 0.0) + family.alpha
    assert spent == pytest.approx(
        {"Q1": 0.025, "Q2": 0.05, "Q2x": 0.05, "Q6": 0.05, "Q7": 0.05, "Q8": 0.05}
    )
    # Q1's second look has nothing left that new seeds can settle: its 0.025 stays unspent.


def test_the_second_look_tests_only_what_the_first_left_open_and_on_more_seeds():
    def tests_of(question: str, look: int) -> list:
        return [t for f in PLAN if (f.question, f.look) == (question, look) for t in f.tests]

    first = {(t.system, t.reference): t.seeds for t in tests_of("Q2", 1)}
    called_at_look_1 = {
        ("init1_sinusoidal", "full_sinusoidal"),
        ("unscaled_init1_sinusoidal", "init1_sinusoidal"),
    }
    for test in tests_of("Q2", 2):
        pair = (test.system, test.reference)
        assert pair in first and pair not in called_at_look_1
        assert set(first[pair]) < set(test.seeds)


def test_q7_tests_learned_against_sinusoidal_on_fresh_seeds_9_to_20_only():
    (q7,) = [family for family in PLAN if family.question == "Q7"]
    (test,) = q7.tests
    assert (test.system, test.reference) == ("sinusoid_rms_learned", "full_sinusoidal")
    assert test.seeds == tuple(range(9, 21)) and q7.look == 1
    before = PLAN[: PLAN.index(q7)]
    earlier = {s for f in before for t in f.tests for s in (t.seeds or ())}
    assert earlier == set(range(1, 9)) and not earlier & set(test.seeds)


def test_q8_tests_each_encoding_against_sinusoidal_on_the_pooled_long_sets_and_fresh_seeds():
    (q8,) = [family for family in PLAN if family.question == "Q8"]
    assert [(t.system, t.reference) for t in q8.tests] == [
        ("length_rms_learned", "length_sinusoidal"),
        ("length_rope", "length_sinusoidal"),
        ("length_alibi", "length_sinusoidal"),
    ]
    assert all(t.test_set == POOLED_LONG and t.seeds == tuple(range(21, 33)) for t in q8.tests)
    assert q8.looks == (4, 8, 12) and q8.alpha == 0.05
    earlier = {s for f in PLAN if f is not q8 for t in f.tests for s in (t.seeds or ())}
    assert not earlier & set(range(21, 33))


def test_the_interaction_is_tested_on_new_seeds_only():
    (q2x,) = [family for family in PLAN if family.question == "Q2x"]
    (test,) = q2x.tests
    assert isinstance(test, Interaction) and not set(test.seeds) & set(FIRST)
    assert test.first == Contrast("unscaled_learned", "full_learned")
    assert test.second == Contrast("unscaled_sinusoidal", "full_sinusoidal")
    assert test.describe() == (
        "(unscaled_learned - full_learned) - (unscaled_sinusoidal - full_sinusoidal)"
    )
