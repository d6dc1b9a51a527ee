"""The study's questions name configurations the sweeps run, and each run's protocol is the
experiment config and precision it trained with."""

import pytest

from minimt.study.protocol import AS_CONFIGURED, protocol_of
from minimt.study.questions import QUESTIONS
from minimt.study.runs import configuration_of
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
