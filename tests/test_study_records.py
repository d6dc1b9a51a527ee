"""The committed study: docs/study/report.md and report.csv are what scripts/report.py makes of
the committed run records; every Q7 run trained from the plan's commit or a later one, started
after that commit was made, stopped by patience and was scored on the three test sets; every Q8
run trained from its plan's commit exactly, after it was made, on torch's AVX2 kernels."""

import json
import re
import subprocess
from collections.abc import Iterable
from datetime import datetime

import pytest

from minimt.study.runs import load_run, load_sweep
from scripts.report import main as report
from tests.helpers import PLANS, REPO, run_in_process

STUDY = REPO / "docs" / "study"
PLAN_PROTOCOL = "study_cpu"
PLAN = PLANS.families_of(PLAN_PROTOCOL)
(Q7,) = next(family.tests for family in PLAN if family.question == "Q7")
Q8 = next(family for family in PLAN if family.question == "Q8")
Q8_SEEDS = Q8.tests[0].seeds
TEST_SETS = {"test_2016_flickr", "test_2017_flickr", "test_2017_mscoco"}


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.strip()


def full_history() -> bool:
    try:
        return git("rev-parse", "--is-shallow-repository") == "false"
    except (OSError, subprocess.CalledProcessError):
        return False


def committed_records(arms: Iterable[str], seeds: Iterable[int]) -> list[tuple[str, dict]]:
    """(run name, metrics) of each committed study_cpu run of `arms` at `seeds`."""
    runs = STUDY / "runs" / PLAN_PROTOCOL
    return [
        (f"{arm}/seed{seed}", json.loads(path.read_text()))
        for arm in arms
        for seed in seeds
        if (path := runs / arm / f"seed{seed}" / "metrics.json").exists()
    ]


def q7_records() -> list[tuple[str, dict]]:
    return committed_records(Q7.arms, Q7.seeds)


def plan_commit(text: str) -> tuple[str, datetime]:
    """The commit that first put `text` into the plan (minimt.study.questions), and when it was
    made."""
    commit = git(
        "log", "--reverse", "--format=%H", "-S", text, "--", "src/minimt/study/questions.py"
    ).splitlines()[0]
    return commit, utc(git("show", "-s", "--format=%cI", commit))


def utc(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.slow
def test_the_committed_report_is_what_the_committed_runs_give(tmp_path):
    report([f"sweep={STUDY / 'runs'}", f"out={tmp_path}"])
    for name in ("report.md", "report.csv"):
        assert (tmp_path / name).read_text() == (STUDY / name).read_text(), name


def test_q7_runs_are_scored_on_three_test_sets_and_stopped_by_patience():
    records = q7_records()
    assert records, f"no Q7 run committed under docs/study/runs/{PLAN_PROTOCOL}"
    for name, metrics in records:
        assert set(metrics["test"]) == TEST_SETS, name
        assert metrics["stop_reason"].startswith("trainer.patience reached"), name


@pytest.mark.skipif(not full_history(), reason="needs the project's git history")
def test_every_q7_run_trained_from_the_plans_commit_or_later_and_after_it_was_made():
    planned, planned_at = plan_commit("Q7_SEEDS")
    for name, metrics in q7_records():
        for start in metrics["provenance"]["sessions"]:
            ancestry = subprocess.run(
                ["git", "merge-base", "--is-ancestor", planned, start["commit"]], cwd=REPO
            )
            assert ancestry.returncode == 0, f"{name} trained from {start['commit']}"
            assert utc(start["started_utc"]) > planned_at, name


@pytest.mark.skipif(not full_history(), reason="needs the project's git history")
def test_every_q8_session_trained_from_the_plans_commit_on_avx2_kernels_after_it_was_made():
    planned, planned_at = plan_commit("Q8_SEEDS")
    q8_arms = {arm for test in Q8.tests for arm in test.arms}
    q8 = committed_records(sorted(q8_arms), Q8_SEEDS)
    assert len(q8) >= Q8.looks[0] * len(q8_arms)
    for name, metrics in q8:
        for start in metrics["provenance"]["sessions"]:
            assert start["commit"] == planned, f"{name} trained from {start['commit']}"
            assert start["cpu"]["kernels"] == "AVX2", name
            assert utc(start["started_utc"]) > planned_at, name


def test_every_collected_run_names_its_machine_from_its_record_or_sidecar():
    runs, _ = load_sweep(STUDY / "runs")
    machines = {(run.configuration.name, run.seed): run.machine for run in runs}
    assert "unrecorded" not in machines.values()
    first = "AMD EPYC (family 25, model 1; torch's AVX2 kernels)"
    second = "AMD EPYC (family 26, model 2; torch's AVX2 kernels, ATEN_CPU_CAPABILITY=avx2)"
    for arm in Q7.arms:
        assert {machines[arm, seed] for seed in Q7.seeds if seed < 19} == {first}
        assert {machines[arm, seed] for seed in (19, 20)} == {second}
        starts = load_run(STUDY / "runs" / PLAN_PROTOCOL / arm / "seed19", None)[0]
        assert len(starts.provenance["discarded_starts"]) == 2, arm


def test_the_q7_recheck_retrained_its_run_bit_for_bit():
    # sinusoid_rms_learned seed 18, trained again from the plan's commit on a machine of the
    # first EPYC's kind (docs/study/rounds/2026-11-27_cpu_round_3_q7.md, its result): every
    # validation and test score equal
    recorded, again = (
        json.loads(
            (
                STUDY / folder / PLAN_PROTOCOL / "sinusoid_rms_learned/seed18/metrics.json"
            ).read_text()
        )
        for folder in ("runs", "recheck")
    )

    def scores(metrics: dict) -> list:
        return [{k: v for k, v in e.items() if k != "seconds"} for e in metrics["val_history"]]

    assert scores(again) == scores(recorded) and again["test"] == recorded["test"]
    assert again["provenance"]["commit"] == recorded["provenance"]["commit"]


def test_the_plan_runner_counts_the_collected_runs_and_gives_the_reports_verdicts(tmp_path, capsys):
    # the plan's runs predate plan files: accepted_runs counts them; nothing is left to train
    args = ["plan=study_cpu", f"dir={tmp_path}", "allow_dirty=true"]
    status, out, _ = run_in_process("study.py", args, capsys)
    assert status is None, out
    for arm, seeds in (("full_sinusoidal", (19,)), ("length_rope", (27, 28))):
        for seed in seeds:
            run = STUDY / "runs" / PLAN_PROTOCOL / arm / f"seed{seed}"
            assert f"deviation: {run.resolve()}: restarted from update 0" in out
    report = (STUDY / "report.md").read_text()
    assert "(21-28) | +2.59 | [+2.00, +3.18] | 1.7e-05 | - | - | - | - | **better** (stopped" in (
        report
    )
    assert "length_rope vs length_sinusoidal on pooled_long: +2.59 [+2.00, +3.18]: better" in out
    assert "sinusoid_rms_learned vs full_sinusoidal on test_2016_flickr: -0.15" in out
    assert out.rstrip().endswith("next: done") and "missing" not in out
    (report,) = [path for path in tmp_path.glob("runs/*/report.md") if "Q8" in path.read_text()]
    listed = report.read_text().split("## Deviations from the plan")[1]
    assert "length_rope/seed27: restarted from update 0 (1 earlier start(s) discarded)" in listed


def test_readmes_study_table_quotes_the_report():
    # README retypes the report's figures: each must be a cell of docs/study/report.md
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| question | answer |") : readme.index("Per-seed tables")]
    report = (STUDY / "report.md").read_text()
    intervals = re.findall(r"([+-]\d+\.\d\d) (\[[+-]\d+\.\d\d, [+-]\d+\.\d\d\])", table)
    assert len(intervals) >= 10
    assert [f for f in intervals if f"| {f[0]} | {f[1]} |" not in report] == []
    alone = re.findall(r"\(([+-]\d+\.\d\d)\)", table)
    assert [f for f in alone if f"| {f} |" not in report] == []
