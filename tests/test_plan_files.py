"""The plan files hold the families of the plans in minimt.study.questions, test for test."""

from minimt.study import questions
from minimt.study.plan import WRITTEN_AFTER, load_plans
from tests.helpers import REPO

PLANS = load_plans(REPO / "configs" / "plan")


def as_loaded(family, after_the_data: tuple[int, ...] = ()) -> tuple:
    """A family of questions.py in the fields a plan file's family has."""
    exploratory = WRITTEN_AFTER if after_the_data else family.exploratory
    return (
        family.question,
        questions.TITLES[family.question],
        repr(family.tests),  # two modules' classes of one shape
        family.look,
        family.alpha,
        exploratory,
        family.looks,
        tuple(family.runs_with.split()),
        after_the_data,
    )


def fields(family) -> tuple:
    return (
        family.question,
        family.title,
        repr(family.tests),  # two modules' classes of one shape
        family.look,
        family.alpha,
        family.exploratory,
        family.looks,
        family.overrides,
        family.on_seeds,
    )


def test_the_plan_files_hold_the_families_of_every_protocol():
    expected = {
        "study_cpu": [as_loaded(f) for f in questions.PLAN],
        "study": [as_loaded(f, questions.FIRST) for f in questions.QUESTIONS]
        + [as_loaded(f) for f in questions.GPU_PLAN],
        "smoke": [as_loaded(f) for f in questions.QUESTIONS],
    }
    for protocol, families in expected.items():
        assert [fields(f) for f in PLANS.families_of(protocol)] == families, protocol
