"""The recipe selection: each run's two candidates, the choice by mean greedy val BLEU over the
planned seeds with the incumbent kept within the tie, and the test sets never read."""

import math

import pytest
from helpers import REPO, SCORES, run_in_process, write_sweep
from scipy import stats

from minimt.study.recipe import (
    Candidate,
    averaged_steps,
    confirmation_size,
    select,
    selection_text,
)
from minimt.study.runs import load_sweep


def test_the_highest_mean_over_the_seeds_is_chosen(tmp_path):
    selection = select(write_sweep(tmp_path))
    chosen = Candidate("model.dropout=0.2", "averaged")
    assert selection.chosen == chosen
    assert selection.mean(chosen) == pytest.approx((39.6 + 39.3 + 39.5) / 3)
    assert selection.differences(chosen) == pytest.approx([1.0, 1.1, 1.1])
    assert selection.block_leader(2) == Candidate("model.dropout=0.3", "best")


def test_a_challenger_within_the_tie_leaves_todays_recipe(tmp_path):
    close = {seed: {0.1: (38.0, 37.0), 0.2: (38.05, 37.0)} for seed in (1, 2, 3)}
    selection = select(write_sweep(tmp_path, close))
    assert selection.leader == Candidate("model.dropout=0.2", "best")
    assert selection.chosen == Candidate("model.dropout=0.1", "best")
    assert "within the plan's 0.1 BLEU" in selection_text(selection, "runs")


def test_no_choice_until_every_planned_score_is_in(tmp_path):
    partial = {1: SCORES[1], 2: SCORES[2] | {0.3: (39.5, None)}}
    selection = select(write_sweep(tmp_path, partial))
    assert selection.chosen is None
    assert "model.dropout=0.3, average of the last 5, seed 2" in selection.missing
    assert "model.dropout=0.1, best checkpoint, seed 3" in selection.missing
    waiting = "seed 2 of model.dropout=0.3, average of the last 5; seed 3 (every candidate)"
    assert f"No choice yet: the plan needs {waiting}." in selection_text(selection, "runs")


def test_the_test_sets_decide_nothing(tmp_path):
    favour_today = {(seed, 0.1): 99.0 for seed in (1, 2, 3)}
    runs = write_sweep(tmp_path, tests=favour_today)
    assert select(runs).chosen == Candidate("model.dropout=0.2", "averaged")
    assert "99" not in selection_text(select(runs), "runs")


def test_the_blocks_table_names_each_runs_machine_updates_and_averaged_steps(tmp_path):
    runs = write_sweep(tmp_path)
    text = selection_text(select(runs), "runs")
    assert "Intel Xeon (family 6, model 143; torch's AVX512 kernels)" in text
    assert "| 3,161 | max_minutes | 38.60 (2,000) | 38.20 (2,800-3,161) |" in text
    assert averaged_steps(runs[0]) == "2,800-3,161"


def test_the_script_writes_the_selection_in_the_sweep_and_beside_collected_runs(tmp_path, capsys):
    write_sweep(tmp_path / "sweep")
    code, out, _ = run_in_process("select_recipe.py", [f"sweep={tmp_path / 'sweep'}"], capsys)
    assert code is None
    written = (tmp_path / "sweep" / "selection.md").read_text()
    assert "**Chosen: model.dropout=0.2, average of the last 5**" in written and written in out
    collect = [f"sweep={tmp_path / 'sweep'}", f"dest={tmp_path / 'docs' / 'runs'}"]
    assert run_in_process("collect_runs.py", collect, capsys)[0] is None
    code, _, _ = run_in_process("select_recipe.py", [f"sweep={tmp_path / 'docs' / 'runs'}"])
    assert code is None and (tmp_path / "docs" / "selection.md").read_text() == written.replace(
        str(tmp_path / "sweep"), str(tmp_path / "docs" / "runs")
    )


def test_the_script_refuses_a_folder_without_runs(tmp_path, capsys):
    code, _, err = run_in_process("select_recipe.py", [f"sweep={tmp_path}"], capsys)
    assert "no finished run under" in str(code) + err


def test_the_committed_selection_is_what_the_committed_runs_give(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the command selection.md names
    recipe = REPO / "docs" / "recipe"
    out = tmp_path / "selection.md"
    assert run_in_process("select_recipe.py", ["sweep=docs/recipe/runs", f"out={out}"])[0] is None
    assert out.read_text() == (recipe / "selection.md").read_text()


def test_the_confirmation_is_powered_at_the_upper_limit_of_the_chosen_candidates_spread(tmp_path):
    """Differences 0.5, 1.5, 1.0 from today's: sd 0.5 on 2 degrees of freedom, whose chi-square
    quantile is closed-form (-2 ln(1 - q)), so the 80% upper limit is 0.5 / sqrt(ln 1.25); the
    seed count is the fewest pairs whose noncentral-t power reaches 80% at a gain of 1 BLEU."""
    spread = {
        seed: {0.1: (38.0, 37.0), 0.2: (38.0 + gain, 37.0)}
        for seed, gain in ((1, 0.5), (2, 1.5), (3, 1.0))
    }
    selection = select(write_sweep(tmp_path, spread))
    size = confirmation_size(selection)
    assert size.sd == pytest.approx(0.5)
    assert size.sd_limit == pytest.approx(0.5 / math.sqrt(math.log(1.25)))

    def power(n: int) -> float:
        critical = stats.t.ppf(0.975, n - 1)
        noncentrality = math.sqrt(n) / size.sd_limit
        lower = stats.nct.cdf(-critical, n - 1, noncentrality)
        return stats.nct.sf(critical, n - 1, noncentrality) + lower

    assert power(size.seeds) >= 0.8 > power(size.seeds - 1)
    assert f"**The confirmation's seed pairs: {size.seeds}**" in selection_text(selection, "runs")


def test_no_confirmation_where_todays_recipe_is_kept_or_nothing_is_chosen(tmp_path):
    close = {seed: {0.1: (38.0, 37.0), 0.2: (38.05, 37.0)} for seed in (1, 2, 3)}
    assert confirmation_size(select(write_sweep(tmp_path / "close", close))) is None
    assert confirmation_size(select(write_sweep(tmp_path / "partial", {1: SCORES[1]}))) is None
    assert "seed pairs" not in selection_text(select(load_sweep(tmp_path / "close")[0]), "runs")
