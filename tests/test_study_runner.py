"""A user's own question, from plan file to verdict with scripts/study.py on tiny runs of
tests/plugins' encodings: the first call freezes the plan and trains look 1 (undecided), an
edited plan is refused, Ctrl-C in the middle of look 2 stops it and the same command resumes it,
a run the plan did not start is listed and not counted, and look 2 ends with a verdict."""

import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from minimt.provenance import PLAN_VARIABLE
from minimt.study import runner
from minimt.study.runner import (
    Look,
    StudyError,
    deviations,
    freeze,
    plan_deviations,
    plan_hash,
    why_not_counted,
)
from minimt.study.runs import Run
from minimt.study.sequential import DIFFERENCE, boundary
from tests.helpers import ENV, REPO, run_in_process, run_script, script_command

PLUGINS = REPO / "tests" / "plugins"
PLAN = """
protocol: smoke_fp32_cpu
questions:
  Q1: Does my binary encoding translate as well as sinusoidal?
families:
  - question: Q1
    alpha: 0.05
    seeds: [1, 2, 3, 4]
    looks: [2, 4]
    arms: [my_binary]
    reference: full_sinusoidal
    overrides:
      - hydra.searchpath=[file://{plugins}/configs]
      - experiment=smoke
      - data.url={data_url}
      - data.dir={data_dir}
      - data.max_train_pairs=300
      - data.max_val_pairs=10
      - data.test_sets=[test_2016_flickr]
      - model.d_model=32
      - model.d_ff=64
      - trainer.precision=fp32
      - trainer.max_steps=6
      - trainer.val_every=1000
      - trainer.save_every=2
      - decoding.test_beam=1
      - decoding.max_len_a=0
      - decoding.max_len_b=4
      - views=false
"""


def study(*args: str, **env: str) -> subprocess.CompletedProcess:
    return run_script("study.py", *args, PYTHONPATH=str(PLUGINS), **env)


def started_runs(runs) -> list:
    return sorted(runs.glob("*/seed*/.hydra"))


@pytest.mark.slow  # real training runs
def test_a_users_plan_runs_look_by_look_to_its_verdict(multi30k_dir, tmp_path):
    plan = tmp_path / "my_configs" / "plan" / "mine.yaml"
    plan.parent.mkdir(parents=True)
    text = PLAN.format(plugins=PLUGINS, data_url=multi30k_dir, data_dir=tmp_path / "data")
    plan.write_text(text)
    # a margin no tiny run can be shown equivalent within: look 1 decides nothing
    args = (f"plan={plan}", f"dir={tmp_path / 'study'}", "allow_dirty=true", "margin=0.001")

    first = study(*args, stdin="")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "Q1, look 1 of 2" in first.stdout and ": continue (" in first.stdout, first.stdout
    assert f"next: python scripts/study.py {' '.join(args)}" in first.stdout
    record = json.loads((tmp_path / "study" / "plan.json").read_text())
    (version,) = record["versions"]
    (runs,) = (tmp_path / "study" / "runs").iterdir()
    assert len(started_runs(runs)) == 4
    metrics = json.loads((runs / "my_binary" / "seed1" / "metrics.json").read_text())
    assert metrics["provenance"]["plan"] == version["hash"]

    plan.write_text(text.replace("alpha: 0.05", "alpha: 0.1"))
    status, _, _ = run_in_process("study.py", list(args))
    assert str(status).startswith(f"error: plan {plan} changed since it was frozen")
    plan.write_text(text)

    foreign = runs / "my_binary" / "seed9"  # trained outside the plan
    shutil.copytree(runs / "my_binary" / "seed1", foreign)
    copied = json.loads((foreign / "metrics.json").read_text())
    copied["config"]["trainer"]["seed"] = 9
    for session in copied["provenance"]["sessions"]:
        del session["plan"]
    (foreign / "metrics.json").write_text(json.dumps(copied))

    stopped = subprocess.Popen(
        script_command("study.py", *args),
        env=ENV | {"PYTHONPATH": str(PLUGINS)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while len(started_runs(runs)) < 6 and time.monotonic() < deadline:
        time.sleep(0.2)  # look 2's first runs have started
    stopped.send_signal(signal.SIGINT)
    out, err = stopped.communicate(timeout=120)
    assert stopped.returncode == 0 and "study stopped (SIGINT)" in err, err[-3000:]
    assert "Traceback" not in err and "verdict" not in out

    resumed = study(*args, stdin="")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "Q1, look 2 of 2" in resumed.stdout and "next: done" in resumed.stdout
    assert f"not counted: {foreign}: not started by this plan" in resumed.stdout
    assert (
        "| my_binary vs full_sinusoidal | test_2016_flickr | 4 (1 2 3 4) |"
        in (runs / "report.md").read_text()
    )
    assert PLAN_VARIABLE not in ENV


def a_run(sessions: list[dict], **provenance) -> Run:
    metrics = {"choices": {"arm": "my_binary", "experiment": "smoke"}, "precision": "fp32"}
    metrics["device"] = "cpu"
    metrics |= {"config": {"trainer": {"seed": 1}}}
    metrics["provenance"] = {"sessions": sessions, **provenance}
    return Run(Path("my_binary/seed1"), metrics)


def test_a_run_counts_only_if_the_plan_started_every_session_from_the_plans_commit():
    record = {"commit": "abc", "versions": [{"hash": "h1"}, {"hash": "h2"}]}
    assert why_not_counted(a_run([{"plan": "h2", "commit": "abc"}]), record, None) == ""
    resumed_by_hand = a_run([{"plan": "h2", "commit": "abc"}, {"commit": "abc"}])
    assert "not started by this plan" in why_not_counted(resumed_by_hand, record, None)
    other_code = a_run([{"plan": "h2", "commit": "def"}])
    assert why_not_counted(other_code, record, None) == "trained from commit def, not abc"
    other_protocol = why_not_counted(a_run([{"plan": "h2", "commit": "abc"}]), record, "study")
    assert other_protocol == "protocol smoke_fp32_cpu, not the plan's study"


def test_a_restart_from_update_0_and_an_earlier_version_are_deviations():
    record = {"commit": "abc", "versions": [{"hash": "h1"}, {"hash": "h2"}]}
    run = a_run([{"plan": "h1", "commit": "abc"}], discarded_starts=[{"from_step": 0}])
    assert deviations(run, record) == [
        "restarted from update 0 (1 earlier start(s) discarded)",
        "started under plan version 1",
    ]


def test_an_amendment_and_a_restarted_seed_are_the_reports_deviations(tmp_path):
    record = {"commit": "abc", "versions": [{"hash": "h1"}]}
    record["versions"].append({"hash": "h2", "frozen_utc": "2026-12-06T09:00:00Z"})
    record["versions"][-1]["reason"] = "a typo in a title"
    run = a_run([{"plan": "h2", "commit": "abc"}], discarded_starts=[{"from_step": 0}])
    look = Look((), Path("my_binary").parent, [run], [], {}, None)
    assert plan_deviations(look, record) == [
        "plan version 2 (hash h2, 2026-12-06T09:00:00Z): a typo in a title",
        "my_binary/seed1: restarted from update 0 (1 earlier start(s) discarded)",
    ]


def test_the_first_call_freezes_the_plan_and_refuses_code_with_uncommitted_changes(
    tmp_path, monkeypatch
):
    plan = tmp_path / "mine.yaml"
    plan.write_text("protocol: x  # a comment\nquestions: {Q1: q}\nfamilies: []\n")
    monkeypatch.setattr(runner, "source_commit", lambda: "abc+dirty")
    with pytest.raises(StudyError, match="allow_dirty=true"):
        freeze(plan, tmp_path / "study", allow_dirty=False)
    assert not (tmp_path / "study").exists()
    record = freeze(plan, tmp_path / "study", allow_dirty=True)
    assert record["commit"] == "abc+dirty" and record["allow_dirty"]
    assert record["versions"][0]["hash"] == plan_hash(
        {"protocol": "x", "questions": {"Q1": "q"}, "families": []}
    )
    plan.write_text("protocol: x\nquestions: {Q1: q}\nfamilies: []\n")  # the comment only
    assert freeze(plan, tmp_path / "study", allow_dirty=False) == record


def test_an_edit_is_refused_unless_it_amends_the_last_version_with_a_reason(tmp_path):
    plan = tmp_path / "mine.yaml"
    plan.write_text("protocol: x\nquestions: {Q1: q}\nfamilies: []\n")
    first = freeze(plan, tmp_path / "study", allow_dirty=True)["versions"][0]["hash"]
    plan.write_text("protocol: y\nquestions: {Q1: q}\nfamilies: []\n")
    with pytest.raises(StudyError, match=f"amends: {{hash: {first}, reason"):
        freeze(plan, tmp_path / "study", allow_dirty=True)
    amended = f"protocol: y\namends: {{hash: {first}, reason: a typo}}\n"
    plan.write_text(amended + "questions: {Q1: q}\nfamilies: []\n")
    versions = freeze(plan, tmp_path / "study", allow_dirty=True)["versions"]
    assert [v["reason"] for v in versions] == ["", "a typo"]


def test_power_mode_prints_each_familys_boundaries_and_what_it_shows_how_often(tmp_path, capsys):
    plan = tmp_path / "mine.yaml"
    plan.write_text(PLAN.format(plugins=PLUGINS, data_url="unused", data_dir="unused"))
    args = [f"plan={plan}", "power=true", "sd=0.9", "draws=2000"]
    status, out, _ = run_in_process("study.py", args, capsys)
    assert status is None
    assert out.startswith("Q1 (look 1): looks at 2, 4 seeds, alpha 0.05 per claim type over 1")
    first_look = boundary(DIFFERENCE, 0.05, (2, 4), 0)
    assert f"| 0.05/1 | difference (t) | {first_look:.3f} |" in out
    assert "| +0 | 0." in out and "of 8 |" in out  # no effect: how often shown, runs of 8
    assert not (REPO / "outputs" / "studies" / "mine").exists()  # power mode freezes nothing
