"""Plan files: the study's plans load as families, a family takes its tests from `tests` or from
`arms` and a `reference`, and a wrong plan is one line naming its file, its key and the fix."""

from pathlib import Path

import pytest

from minimt.config import validate_config
from minimt.data.length_split import POOLED_LONG
from minimt.study.plan import WRITTEN_AFTER, Contrast, PlanError, load_plan, load_plans
from scripts.report import main as report
from tests.helpers import PLANS, REPO, compose_config

GOOD = """
protocol: mine
questions:
  Q1: Is mine better than sinusoidal?
families:
  - question: Q1
    alpha: 0.05
    seeds: [1, 2, 3, 4]
    looks: [2, 4]
    endpoint: pooled_long
    arms: [mine_a, mine_b]
    reference: full_sinusoidal
"""


def write_plan(folder: Path, text: str, name: str = "mine") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_study_plans_are_read_in_the_order_of_their_names():
    assert [(plan.name, plan.protocol) for plan in PLANS.plans] == [
        ("questions", None),
        ("study_cpu", "study_cpu"),
        ("study_gpu", "study"),
    ]
    questions = [f.question for f in PLANS.families_of("a protocol no plan names")]
    assert questions == ["Q1", "Q2", "Q3", "Q4", "Q5"]


def test_a_plan_written_after_the_data_takes_the_other_plans_families_on_the_seeds_analysed():
    study = PLANS.families_of("study")
    taken = [f for f in study if f.exploratory]
    assert [f.question for f in taken] == ["Q1", "Q2", "Q3", "Q4", "Q5"]
    assert all(f.exploratory == WRITTEN_AFTER and f.on_seeds == (1, 2, 3) for f in taken)
    assert [f.question for f in study if not f.exploratory] == ["Q1", "Q6", "Q2"]


def test_arms_and_a_reference_are_each_arm_against_the_reference(tmp_path):
    (family,) = load_plan(write_plan(tmp_path, GOOD)).families
    assert family.tests == (
        Contrast("mine_a", "full_sinusoidal", seeds=(1, 2, 3, 4), test_set=POOLED_LONG),
        Contrast("mine_b", "full_sinusoidal", seeds=(1, 2, 3, 4), test_set=POOLED_LONG),
    )
    assert (family.title, family.looks, family.alpha) == (
        "Is mine better than sinusoidal?",
        (2, 4),
        0.05,
    )


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (("    alpha: 0.05\n", "    alpha: 5\n"), "families[0].alpha"),
        (("    looks: [2, 4]\n", "    looks: [2, 3]\n"), "families[0].looks"),
        (("    looks: [2, 4]\n", "    looks: [4, 2]\n"), "families[0].looks"),
        (("seeds: [1, 2, 3, 4]", "seeds: [1, 1, 3, 4]"), "families[0].seeds"),
        (("  - question: Q1\n", "  - question: Q9\n"), "families[0].question Q9"),
        (("    endpoint", "    colour: red\n    endpoint"), "unknown key families[0].colour"),
        (("protocol: mine\n", ""), "protocol is missing"),
        (("    reference: full_sinusoidal\n", ""), "families[0] needs arms"),
        (
            ("    arms: [mine_a, mine_b]\n", "    tests: [mine_a against full_sinusoidal]\n"),
            "families[0] needs either tests or arms",
        ),
        (("questions:\n", "questions: [\n"), "is not valid YAML"),
        (("    endpoint", "    overrides: [trainer.seed=3]\n    endpoint"), "sets trainer.seed=3"),
    ],
)
def test_a_wrong_plan_is_one_line_naming_the_file_and_the_key(tmp_path, change, named):
    path = write_plan(tmp_path, GOOD.replace(*change))
    with pytest.raises(PlanError) as error:
        load_plan(path)
    message = str(error.value)
    assert message.startswith(f"plan {path}") and named in message, message


def test_a_wrong_test_says_how_to_write_one(tmp_path):
    text = GOOD.replace("    arms: [mine_a, mine_b]\n    reference: full_sinusoidal\n", "")
    path = write_plan(tmp_path, text + "    tests: [mine_a against full_sinusoidal]\n")
    with pytest.raises(PlanError, match="write 'system vs reference'"):
        load_plan(path)


def test_the_report_script_ends_on_a_wrong_plan_in_one_line(tmp_path, capsys):
    write_plan(tmp_path / "plans", GOOD.replace("alpha: 0.05", "alpha: 1.5"))
    with pytest.raises(SystemExit) as stop:
        report([f"sweep={REPO / 'docs' / 'study' / 'runs'}", f"plans={tmp_path / 'plans'}"])
    (line,) = str(stop.value).splitlines()
    assert line.startswith("error: plan ") and "families[0].alpha" in line
    with pytest.raises(SystemExit) as stop:
        report([f"sweep={tmp_path}", f"plans={tmp_path / 'none'}"])
    assert (
        str(stop.value)
        == f"error: plans={tmp_path / 'none'} is not a folder; name the folder of your plan files"
    )


def test_the_recipe_decision_is_superiority_on_bf16_and_non_inferiority_on_slow_cpus():
    plans = {plan.name: plan for plan in load_plans(REPO / "configs" / "recipe_plan").plans}
    assert plans.keys() == {"bf16_30_minutes", "slow_cpu"}
    (r1,) = plans["bf16_30_minutes"].families
    r2, r3 = plans["slow_cpu"].families
    assert plans["bf16_30_minutes"].protocol == "as_configured_bf16_cpu"
    assert plans["slow_cpu"].protocol == "as_configured_fp32_cpu"
    assert (r1.claims, r1.alpha, len(r1.tests[0].seeds)) == ("difference_and_equivalence", 0.05, 12)
    for family in (r2, r3):
        assert (family.claims, family.alpha, family.margin) == ("non_inferiority", 0.05, 0.5)
    assert {f"{t.system} vs {t.reference}" for f in (r1, r2, r3) for t in f.tests} == {
        "recipe_adaptive vs recipe_static"
    }
    assert [f.overrides[:2] for f in (r1, r2, r3)] == [
        ("trainer.max_minutes=30", "trainer.precision=bf16"),
        ("trainer.max_minutes=30", "trainer.precision=fp32"),
        ("trainer.max_minutes=55", "trainer.precision=fp32"),
    ]
    for family in (r1, r2, r3):  # each run the plans start composes and passes the config rules
        for arm in ("recipe_static", "recipe_adaptive"):
            cfg = compose_config(*family.overrides, f"arm={arm}", "trainer.seed=41")
            validate_config(cfg)
            assert cfg.trainer.adapt == (arm == "recipe_adaptive")
