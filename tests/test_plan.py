"""The plan's families answered from runs: a family is tested only with all its planned seeds,
Holm over its fixed size; an interaction is the per-seed difference of two differences; the init
ratio of a run that did not record it is the one its config gives."""

import copy
import functools
import json
import math
from collections import defaultdict
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from scipy import stats

from minimt.config import build_model
from minimt.rundir import DamagedRecord
from minimt.study.answers import OTHER_ARMS, answer_questions
from minimt.study.plan import PlanError, Plans, load_plan
from minimt.study.runs import Run, init_ratio
from minimt.study.significance import Rules, holm, paired_difference
from tests.helpers import PLANS, compose_config

TEST_SET = "test_2016_flickr"


@functools.cache
def arm_config(arm: str, experiment: str) -> dict:
    """The resolved config of `arm`, composed once: Hydra's compose is most of these tests' time."""
    return OmegaConf.to_container(
        compose_config(f"experiment={experiment}", f"arm={arm}"), resolve=True
    )


def run(arm: str, seed: int, bleu: float, experiment: str = "study_cpu") -> Run:
    config = copy.deepcopy(arm_config(arm, experiment))
    config["trainer"]["seed"] = seed  # no other key of the configs interpolates it
    metrics = {
        "config": config,
        "choices": {"experiment": experiment, "arm": arm},
        "test": {TEST_SET: {"bleu": bleu}},
        "precision": "fp32",
        "device": "cpu",
    }
    return Run(Path(f"{arm}/seed{seed}"), metrics)


def test_a_runs_seed_changes_only_trainer_seed_in_its_resolved_config():
    composed = compose_config("experiment=study_cpu", "arm=sinusoid_rms_learned", "trainer.seed=9")
    assert run("sinusoid_rms_learned", 9, 39).metrics["config"] == OmegaConf.to_container(
        composed, resolve=True
    )


def scores(arm: str, seeds, base: float, step: float) -> list[Run]:
    return [run(arm, s, base + step * s) for s in seeds]


def answers_of(runs: list[Run]) -> list:
    groups = defaultdict(list)
    for r in runs:
        groups[r.configuration].append(r)
    return answer_questions(groups, TEST_SET, Rules(), plans=PLANS)


def family(question: str, look: int, runs: list[Run]):
    answers = answers_of(runs)
    return next(a for a in answers if (a.family.question, a.family.look) == (question, look))


def test_a_family_is_tested_only_once_every_test_has_its_planned_seeds():
    seeds = (1, 2, 3)
    runs = scores("full_sinusoidal", seeds, 39, 0.1) + scores("full_learned", seeds, 37, 0.3)
    partial = family("Q1", 1, runs)
    assert not partial.complete and [c.verdict for c in partial.comparisons] == [None, None]
    assert partial.comparisons[0].difference.mean == pytest.approx(-2 + 0.2 * 2)
    assert partial.comparisons[1].seeds == [] and partial.comparisons[1].difference is None
    assert partial.record(partial.comparisons[1])["verdict"] == "waiting: 0 of 3 planned seeds in"
    assert partial.record(partial.comparisons[0])["verdict"] == "waiting for its family"

    complete = family("Q1", 1, runs + scores("full_rope", seeds, 40, -0.2))
    p = [c.difference.p_value for c in complete.comparisons]
    assert [c.verdict.holm_p for c in complete.comparisons] == pytest.approx(holm(p))
    assert complete.size == 2 and complete.alpha == 0.025  # m and alpha fixed by the plan


def test_only_the_planned_seeds_enter_a_planned_test():
    runs = scores("full_sinusoidal", range(1, 7), 39, 0.1) + scores(
        "full_learned", range(1, 7), 37, 0.3
    )
    (learned, _) = family("Q1", 1, runs).comparisons
    assert learned.seeds == [1, 2, 3]


def test_the_interaction_is_the_per_seed_difference_of_differences_on_new_seeds_only():
    new = (4, 5, 6, 7, 8)
    runs = (
        scores("full_sinusoidal", (1, *new), 39, 0.1)
        + scores("unscaled_sinusoidal", (1, *new), 37, 0.05)
        + scores("full_learned", (1, *new), 37, 0.2)
        + scores("unscaled_learned", (1, *new), 38, 0.4)
    )
    (result,) = family("Q2x", 1, runs).comparisons
    assert result.seeds == list(new)
    sinusoidal = [(37 + 0.05 * s) - (39 + 0.1 * s) for s in new]
    learned = [(38 + 0.4 * s) - (37 + 0.2 * s) for s in new]
    expected = paired_difference(sinusoidal, learned)
    assert result.difference.mean == pytest.approx(expected.mean)
    assert result.verdict.holm_p == pytest.approx(expected.p_value)  # a family of one


def test_runs_of_another_protocol_never_enter_the_plan():
    runs = [run("full_sinusoidal", s, 39, experiment="study") for s in (1, 2, 3)]
    answers = answers_of(runs)
    assert answers and all(a.family not in PLANS.families_of("study_cpu") for a in answers)


def test_experiment_study_keeps_seeds_1_3_exploratory_and_tests_its_plan_on_new_seeds():
    means = {"full_sinusoidal": 39, "full_learned": 36, "full_rope": 40, "sinusoid_rms_learned": 38}
    runs = []
    for i, (arm, bleu) in enumerate(means.items()):
        for s in range(1, 9):
            runs.append(run(arm, s, bleu + 0.1 * (s * (i + 2) % 5), experiment="study"))
            runs[-1].metrics |= {"precision": "bf16", "device": "cuda"}
    answers = answers_of(runs)
    explored = [a for a in answers if not a.family.planned and a.comparisons]
    assert explored and all(a.exploratory == "plan written after the data" for a in explored)
    assert {s for a in explored for c in a.comparisons for s in c.seeds} == {1, 2, 3}
    planned = {a.family.question: a for a in answers if a.family.planned}
    assert set(planned) == {"Q1", "Q2", "Q6"} and not any(a.exploratory for a in planned.values())
    learned, rope = planned["Q1"].comparisons
    assert learned.test.describe() == "full_learned vs full_sinusoidal"
    assert learned.seeds == rope.seeds == [4, 5, 6, 7, 8]
    bleu = {(r.arm, r.seed): r.scores(TEST_SET)["bleu"] for r in runs}
    expected = paired_difference(
        *([bleu[a, s] for s in range(4, 9)] for a in learned.test.arms[::-1])
    )
    assert learned.difference.mean == pytest.approx(expected.mean)
    p_values = [c.difference.p_value for c in planned["Q6"].comparisons]
    holm_p = [c.verdict.holm_p for c in planned["Q6"].comparisons]
    assert holm_p == pytest.approx(holm(p_values))  # Holm over the family's 2 tests


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


def scored_on_2017_too(r: Run, shift: float, machine: str = "AMD EPYC 7B13") -> Run:
    """The run, also scored on the two 2017 test sets (headline BLEU + shift), on `machine`."""
    bleu = r.scores(TEST_SET)["bleu"]
    r.metrics["test"] |= {name: {"bleu": bleu + shift} for name in SECONDARY_SETS}
    r.metrics["provenance"] = {"machine": machine}
    return r


SECONDARY_SETS = ("test_2017_flickr", "test_2017_mscoco")


def test_q7_is_tested_on_the_headline_alone_and_reports_the_2017_sets_beside_it():
    seeds = range(9, 21)
    learned = [scored_on_2017_too(r, -5.0) for r in scores("sinusoid_rms_learned", seeds, 39, 0)]
    sinusoidal = [scored_on_2017_too(r, -4.0) for r in scores("full_sinusoidal", seeds, 39, 0.01)]
    earlier = scores("full_sinusoidal", range(1, 9), 30, 0) + scores(
        "sinusoid_rms_learned", range(1, 9), 45, 0
    )  # seeds 1-8, scored on test_2016_flickr only, never enter Q7
    q7 = family("Q7", 1, learned + sinusoidal + earlier)
    headline, *secondary = q7.comparisons
    assert q7.complete and q7.size == 1 and q7.tested == [headline]
    assert headline.test_set == TEST_SET and headline.seeds == list(seeds)
    assert headline.verdict is not None and headline.difference.mean == pytest.approx(
        -0.01 * sum(seeds) / 12
    )
    assert [c.test_set for c in secondary] == list(SECONDARY_SETS)
    for c in secondary:
        assert c.secondary and c.verdict is None and c.seeds == list(seeds)
        assert c.difference.mean == pytest.approx(headline.difference.mean - 1.0)
        assert q7.record(c)["verdict"] == "secondary: not tested"
    assert not headline.mixes_machines


def test_a_comparison_names_its_machines_where_its_runs_trained_on_more_than_one():
    seeds = range(9, 21)
    learned = [scored_on_2017_too(r, 0) for r in scores("sinusoid_rms_learned", seeds, 39, 0)]
    sinusoidal = [
        scored_on_2017_too(r, 0, "AMD EPYC 7B13" if r.seed < 15 else "Intel Xeon")
        for r in scores("full_sinusoidal", seeds, 39, 0)
    ]
    (headline, *_) = family("Q7", 1, learned + sinusoidal).comparisons
    assert headline.mixes_machines
    assert headline.describe_machines() == (
        "sinusoid_rms_learned on AMD EPYC 7B13 (9-20); "
        "full_sinusoidal on AMD EPYC 7B13 (9-14), Intel Xeon (15-20)"
    )


def test_a_run_without_provenance_is_named_by_its_gpu_or_unrecorded():
    assert run("share_none", 1, 39, experiment="study").machine == "unrecorded"  # device "cpu"
    on_gpu = run("share_none", 1, 39, experiment="study")
    on_gpu.metrics["device"] = "NVIDIA H100 80GB HBM3"
    assert on_gpu.machine == "NVIDIA H100 80GB HBM3"


def test_a_sidecar_adds_to_and_corrects_a_records_provenance(tmp_path):
    r = run("sinusoid_rms_learned", 19, 39)
    r.dir = tmp_path
    r.metrics["provenance"] = {"machine": "AMD EPYC", "commit": "413ee26"}
    assert r.machine == "AMD EPYC"
    sidecar = {
        "cpu": {"family": 26, "model": 2, "model_name": "AMD EPYC", "kernels": "AVX2"},
        "environment": {"ATEN_CPU_CAPABILITY": "avx2"},
    }
    (tmp_path / "provenance.json").write_text(json.dumps(sidecar))
    del r.provenance  # the cached read
    assert (
        r.machine == "AMD EPYC (family 26, model 2; torch's AVX2 kernels, ATEN_CPU_CAPABILITY=avx2)"
    )
    assert r.provenance["commit"] == "413ee26"


def test_a_damaged_sidecar_is_an_error_that_names_it(tmp_path):
    r = run("full_sinusoidal", 9, 39)
    r.dir = tmp_path
    (tmp_path / "provenance.json").write_text('{"cpu": ')
    with pytest.raises(DamagedRecord, match=r"provenance\.json is not valid JSON.*restore it"):
        _ = r.machine


def test_an_arm_no_question_covers_gets_an_exploratory_verdict_against_the_reference():
    def user_arm(seed: int, bleu: float) -> Run:
        r = run("full_sinusoidal", seed, bleu, experiment="smoke")
        r.metrics["choices"] = {"experiment": "smoke", "arm": "my_t5"}
        return r

    seeds = range(1, 6)
    runs = [run("full_sinusoidal", s, 30 + 0.1 * s, experiment="smoke") for s in seeds]
    runs += [user_arm(s, 31 + 0.12 * s) for s in seeds]
    (other,) = [a for a in answers_of(runs) if a.family.question == OTHER_ARMS]
    (comparison,) = other.comparisons
    assert comparison.test.describe() == "my_t5 vs full_sinusoidal"
    assert other.exploratory and other.complete and other.size == 1
    assert comparison.difference.mean == pytest.approx(1 + 0.02 * 3)
    record = other.record(comparison)
    assert record["verdict"] == "better" and record["exploratory"]
    assert record["seeds_for_difference"] is not None and record["tost_holm_p"] is not None
    declared = [run("full_learned", s, 29, experiment="smoke") for s in seeds]
    assert not [a for a in answers_of(runs[:5] + declared) if a.family.question == OTHER_ARMS]


def test_a_non_inferiority_family_shows_worse_by_less_than_its_margin_one_sided_under_holm(
    tmp_path,
):
    plan = tmp_path / "slow.yaml"
    plan.write_text(
        "protocol: study_cpu\nquestions: {R1: Does the new recipe keep up on a slow machine}\n"
        "families:\n  - question: R1\n    claims: non_inferiority\n    margin: 0.5\n"
        "    seeds: [1, 2, 3, 4]\n    arms: [sinusoid_rms_learned, full_learned]\n"
        "    reference: full_sinusoidal\n"
    )
    seeds = (1, 2, 3, 4)
    runs = scores("full_sinusoidal", seeds, 39, 0.0)
    runs += [run("sinusoid_rms_learned", s, 39 - 0.2 + 0.02 * (-1) ** s) for s in seeds]
    runs += [run("full_learned", s, 39 - 0.6 + 0.02 * (-1) ** s) for s in seeds]
    groups = defaultdict(list)
    for r in runs:
        groups[r.configuration].append(r)
    plans = Plans((load_plan(plan),))
    (answer,) = answer_questions(groups, TEST_SET, Rules(), plans=plans)
    kept_up, fell_behind = answer.comparisons
    p = []
    for c in (kept_up, fell_behind):
        d = c.difference
        p.append(stats.t.sf((d.mean + 0.5) / (d.sd / math.sqrt(4)), 3))
    assert kept_up.verdict.holm_p == pytest.approx(2 * min(p))  # Holm over the family's 2
    assert kept_up.verdict.verdict == "non-inferior"
    assert fell_behind.verdict.verdict == "inconclusive"
    assert fell_behind.verdict.reason == "not shown worse by less than 0.5"


def test_a_non_inferiority_family_has_one_look_and_a_positive_margin(tmp_path):
    plan = tmp_path / "slow.yaml"
    text = (
        "protocol: x\nquestions: {R1: q}\nfamilies:\n  - question: R1\n"
        "    claims: non_inferiority\n    margin: 0.5\n    seeds: [1, 2, 3, 4]\n"
        "    arms: [a]\n    reference: b\n"
    )
    for change, named in (
        (
            ("seeds: [1, 2, 3, 4]", "seeds: [1, 2, 3, 4]\n    alpha: 0.05\n    looks: [2, 4]"),
            "one look",
        ),
        (("margin: 0.5", "margin: -1"), "margin must be a positive number"),
        (("non_inferiority", "superiority"), "claims must be"),
    ):
        plan.write_text(text.replace(*change))
        with pytest.raises(PlanError, match=named):
            load_plan(plan)
