"""The recipe confirmation: the selection's choice against today's recipe on the planned seed
pairs, no test figure shown before the one look, the paired verdict on test_2016_flickr, the
secondary sets Holm-adjusted, and the two gates on speed deciding with it."""

import json
import math
import statistics

import pytest
from helpers import INTEL, SCORES, run_in_process, write_recipe_run, write_sweep

from minimt.study.confirmation import (
    HEADLINE,
    SECONDARY,
    NoConfirmation,
    confirm,
    confirmation_text,
)
from minimt.study.recipe import select
from minimt.study.runs import load_sweep

EPYC = {"vendor": "AuthenticAMD", "family": 26, "model": 2, "model_name": "AMD EPYC"}
EPYC |= {"kernels": "AVX512"}
# seed -> (today's test_2016_flickr, the chosen average's); the 2017 sets are these minus 5
FIGURES = {11: (39.11, 40.37), 12: (38.73, 40.05), 13: (39.42, 40.19)}


def score_run(run_dir, best, average=None, average_val=39.9, steps=2400, max_steps=None):
    """Give a written recipe run the confirmation's figures: `best` and `average` (scored where
    trainer.average_last=5 is set, its val BLEU at `average_val` or unscored where None) on
    test_2016_flickr, each minus 5 on the 2017 sets; `steps` updates, under `max_steps`."""
    path = run_dir / "metrics.json"
    metrics = json.loads(path.read_text())

    def on_each_set(figure: float) -> dict:
        tests = {HEADLINE: {"bleu": figure, "beam": 5}}
        return tests | {name: {"bleu": figure - 5.0, "beam": 5} for name in SECONDARY}

    metrics |= {"steps": steps, "test": on_each_set(best)}
    if max_steps is not None:
        metrics["config"]["trainer"]["max_steps"] = max_steps
    if average is not None:
        metrics["config"]["trainer"]["average_last"] = 5
        metrics["test_average"] = on_each_set(average)
        if average_val is not None:
            metrics["eval"] = {"val.beam1.averaged": {"bleu": average_val}}
    path.write_text(json.dumps(metrics))


def write_pair(root, seed, today, chosen, cpu=INTEL, average_val=39.9, **budget):
    """Seed `seed`'s pair as the confirmation sweep leaves it: today's recipe (dropout 0.1, best
    validation 39.8) and the selection's choice in SCORES (dropout 0.2, its average reported)."""
    score_run(write_recipe_run(root, 0.1, seed, best=39.8, cpu=cpu), today, **budget)
    chosen_run = write_recipe_run(root, 0.2, seed, best=39.8, cpu=cpu)
    score_run(chosen_run, 0.0, average=chosen, average_val=average_val, **budget)


def confirmation(tmp_path, figures=FIGURES, slow=(38.0, 37.5), **pair):
    selection = select(write_sweep(tmp_path / "selection", SCORES))
    for seed, (today, chosen) in figures.items():
        write_pair(tmp_path / "confirm", seed, today, chosen, **pair)
    if slow is not None:
        write_pair(tmp_path / "slow", 11, *slow, steps=850, max_steps=850)
    runs, slow_runs = load_sweep(tmp_path / "confirm")[0], load_sweep(tmp_path / "slow")[0]
    return confirm(selection, runs, slow_runs if slow else [])


def test_the_planned_pairs_come_from_the_selections_power_calculation(tmp_path):
    c = confirmation(tmp_path)
    assert c.seeds == (11, 12, 13)  # the selection's spread is small: the least, 3
    assert c.chosen.title == "model.dropout=0.2, average of the last 5"
    assert c.incumbent.title == "model.dropout=0.1, best checkpoint"


def test_no_test_figure_is_shown_before_the_one_look(tmp_path):
    c = confirmation(tmp_path, {11: FIGURES[11], 12: FIGURES[12]})
    assert c.decision is None
    text = confirmation_text(c, "runs", "slow")
    assert "waits for the pair of seed 13" in text
    for figure in ("39.11", "40.37", "38.73", "35.", "+1."):
        assert figure not in text
    assert "| 11 | Intel Xeon (family 6, model 143; torch's AVX512 kernels) |" in text


def test_the_look_gives_the_paired_verdict_and_the_decision(tmp_path):
    """Differences 1.26, 1.32, 0.77 on every test set: Student t on 2 degrees of freedom has
    F(t) = 1/2 + t / (2 sqrt(2 + t^2)), so the two-sided p is 1 - t / sqrt(2 + t^2); Holm doubles
    the two secondary sets' equal p."""
    c = confirmation(tmp_path)
    differences = [chosen - today for today, chosen in FIGURES.values()]
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    t = mean / (sd / math.sqrt(3))
    p = 1 - t / math.sqrt(2 + t * t)
    primary = c.difference(HEADLINE)
    assert primary.mean == pytest.approx(mean) and primary.p_value == pytest.approx(p)
    assert c.better and p < 0.05
    assert c.keeps_up == pytest.approx(39.9 - 39.8)
    assert c.slow_difference == pytest.approx(-0.5)
    assert c.decision is True
    text = confirmation_text(c, "runs", "slow")
    assert f"minus today's recipe {mean:+.2f} BLEU" in text and "**better**" in text
    assert "**The default changes to model.dropout=0.2, average of the last 5.**" in text
    assert "| 11 | Intel Xeon (family 6, model 143; torch's AVX512 kernels) | 0123456 |" in text
    assert "| 2,400 / 2,400 | max_minutes / max_minutes | 39.11 | 40.37 | +1.26 |" in text
    assert f"| test_2017_mscoco | {mean:+.2f} |" in text
    assert f"| {p:.3f} | {2 * p:.3f} |" in text
    assert "(at least -1.0): passed" in text and "| 3 (11, 12, 13) |" in text


def test_one_run_gives_both_figures_where_the_choice_is_todays_dropout_averaged(tmp_path):
    averaged_wins = {seed: {0.1: (38.0, 39.0 + seed / 10), 0.2: (37.5, 37.0)} for seed in (1, 2, 3)}
    selection = select(write_sweep(tmp_path / "selection", averaged_wins))
    assert selection.chosen.title == "model.dropout=0.1, average of the last 5"
    for root, seed, budget in [("confirm", s, {}) for s in (11, 12, 13)] + [
        ("slow", 11, {"steps": 850, "max_steps": 850})
    ]:
        run_dir = write_recipe_run(tmp_path / root, 0.1, seed, best=39.8)
        score_run(run_dir, 39.0, average=40.0 + seed / 100, **budget)
    c = confirm(selection, load_sweep(tmp_path / "confirm")[0], load_sweep(tmp_path / "slow")[0])
    assert all(pair.runs == [pair.today] for pair in c.pairs.values())
    assert c.difference(HEADLINE).mean == pytest.approx(1.12)
    assert "| 2,400 | max_minutes |" in confirmation_text(c, "runs", "slow")


def test_a_run_without_the_secondary_sets_or_the_slow_budget_is_not_counted(tmp_path):
    selection = select(write_sweep(tmp_path / "selection", SCORES))
    write_recipe_run(tmp_path / "more", 0.1, 12, best=39.0)  # scored on test_2016_flickr only
    write_pair(tmp_path / "slow_but_full", 11, 38.0, 37.5)  # trainer.max_steps as the default
    c = confirm(
        selection, load_sweep(tmp_path / "more")[0], load_sweep(tmp_path / "slow_but_full")[0]
    )
    assert c.refused[0] == (
        f"{tmp_path / 'more' / 'dropout0.1' / 'seed12'}: not scored on test_2017_flickr, "
        "test_2017_mscoco: train it with the confirm sweep's test sets"
    )
    assert "trainer.max_steps=100000 is not the slow pair's budget" in c.refused[1]
    assert c.slow is None


def test_a_slow_machine_collapse_keeps_todays_recipe(tmp_path):
    c = confirmation(tmp_path, slow=(38.0, 36.5))
    assert c.better and c.decision is False
    assert "it falls behind on a slow machine" in confirmation_text(c, "runs", "slow")


def test_an_average_that_falls_behind_the_best_validation_keeps_todays_recipe(tmp_path):
    c = confirmation(tmp_path, average_val=39.5)
    assert c.keeps_up == pytest.approx(-0.3) and c.decision is False
    assert "its reported checkpoint falls behind" in confirmation_text(c, "runs", "slow")


def test_the_look_waits_for_the_averages_val_scores_and_the_slow_pair(tmp_path):
    c = confirmation(tmp_path, average_val=None, slow=None)
    assert c.waiting == [
        "the slow pair (seed 11, trainer.max_steps=850)",
        "the chosen runs' averages scored on validation",
    ]


def test_a_pair_on_two_machines_or_an_unplanned_seed_is_not_counted(tmp_path):
    confirmation(tmp_path, {11: FIGURES[11], 12: FIGURES[12], 14: FIGURES[13]})
    today_12 = tmp_path / "confirm" / "dropout0.1" / "seed12" / "metrics.json"
    metrics = json.loads(today_12.read_text())
    metrics["provenance"]["cpu"] = EPYC
    today_12.write_text(json.dumps(metrics))
    selection = select(load_sweep(tmp_path / "selection")[0])
    c = confirm(selection, load_sweep(tmp_path / "confirm")[0], [])
    assert list(c.pairs) == [11]
    seed14 = tmp_path / "confirm" / "dropout0.1" / "seed14"
    assert c.refused[0] == f"{seed14}: not a planned seed (seeds 11-13)"
    assert c.refused[2].startswith("seed 12: its runs trained on two machines (AMD EPYC")
    assert f"- {seed14}: not a planned seed" in confirmation_text(c, "runs", "slow")


def test_nothing_to_confirm_before_a_choice_or_when_todays_recipe_is_kept(tmp_path, capsys):
    partial = select(write_sweep(tmp_path / "partial", {1: SCORES[1]}))
    with pytest.raises(NoConfirmation, match="has not chosen yet"):
        confirm(partial, [], [])
    close = {seed: {0.1: (38.0, 37.0), 0.2: (38.05, 37.0)} for seed in (1, 2, 3)}
    write_sweep(tmp_path / "close", close)
    write_pair(tmp_path / "confirm", 11, 39.0, 40.0)
    argv = [f"sweep={tmp_path / 'confirm'}", f"slow={tmp_path / 'slow'}"]
    argv.append(f"selection={tmp_path / 'close'}")
    code, _, _ = run_in_process("confirm_recipe.py", argv, capsys)
    assert code == "error: the selection keeps today's recipe: nothing to confirm"


def test_the_script_writes_the_confirmation_beside_its_runs(tmp_path, capsys):
    write_sweep(tmp_path / "selection", SCORES)
    for seed, (today, chosen) in FIGURES.items():
        write_pair(tmp_path / "confirm", seed, today, chosen)
    write_pair(tmp_path / "slow", 11, 38.0, 37.5, steps=850, max_steps=850)
    argv = [f"sweep={tmp_path / 'confirm'}", f"slow={tmp_path / 'slow'}"]
    argv.append(f"selection={tmp_path / 'selection'}")
    code, out, _ = run_in_process("confirm_recipe.py", argv, capsys)
    assert code is None
    written = (tmp_path / "confirm" / "confirmation.md").read_text()
    assert "**The default changes to" in written and written in out


def test_the_two_changes_apart_are_shown_after_the_look_where_both_arms_averaged(tmp_path):
    """Averaging at dropout 0.1 gains 1.0, 1.2, 0.8: mean 1.0, sd 0.2, so the 95% interval is
    1.0 +- t(0.975, 2) 0.2 / sqrt(3) = 1.0 +- 0.497. Only the look shows it, and only where the
    incumbent's runs scored their average too (the other tests' do not)."""
    selection = select(write_sweep(tmp_path / "selection", SCORES))
    # seed -> (dropout 0.1 best, its average, dropout 0.2 best, its average)
    figures = {
        11: (39.0, 40.0, 40.0, 41.0),
        12: (39.2, 40.4, 39.8, 40.8),
        13: (38.8, 39.6, 40.2, 40.6),
    }
    slow = (38.8, 38.0, 36.9, 36.4)
    for root, seed, (best, average, chosen_best, chosen_average), budget in [
        *((tmp_path / "confirm", seed, f, {}) for seed, f in figures.items()),
        (tmp_path / "slow", 11, slow, {"steps": 850, "max_steps": 850}),
    ]:
        score_run(write_recipe_run(root, 0.1, seed, best=39.8), best, average=average, **budget)
        chosen_run = write_recipe_run(root, 0.2, seed, best=39.8)
        score_run(chosen_run, chosen_best, average=chosen_average, **budget)
    runs, slow_runs = load_sweep(tmp_path / "confirm")[0], load_sweep(tmp_path / "slow")[0]
    text = confirmation_text(confirm(selection, runs, slow_runs), "runs", "slow")
    assert "## The two changes apart (exploratory)" in text
    assert "| model.dropout=0.1, average of the last 5 | 40.00 | 38.00 |" in text
    assert "| model.dropout=0.2, best checkpoint | 40.00 | 36.90 |" in text
    assert (
        "| model.dropout=0.1, average of the last 5 minus model.dropout=0.1, best checkpoint "
        "| +1.00 | [+0.50, +1.50] | -0.80 |"
    ) in text
    assert (
        "| model.dropout=0.2, average of the last 5 minus model.dropout=0.2, best checkpoint "
        "| +0.80 |"
    ) in text
    assert (
        "model.dropout=0.2, best checkpoint minus model.dropout=0.1, best checkpoint | +1.00 |"
        in text
    )

    waiting = confirm(selection, runs, [])
    assert "two changes apart" not in confirmation_text(waiting, "runs", "slow")


def test_the_two_changes_are_not_shown_where_todays_runs_scored_no_average(tmp_path):
    assert "two changes apart" not in confirmation_text(confirmation(tmp_path), "runs", "slow")
