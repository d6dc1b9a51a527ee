import json

from tests.helpers import load_script, run_script

budget = load_script("scripts/bench/budget_table.py")
budget_table, differing_settings, flat_settings = (
    budget.budget_table,
    budget.differing_settings,
    budget.flat_settings,
)


def metrics(lr: float, url: str, steps: int, test_bleu: float) -> dict:
    return {
        "config": {"trainer": {"lr": lr, "seed": 1}, "data": {"url": url, "test_sets": ["t"]}},
        "steps": steps,
        "val_history": [{"step": 500, "bleu": 20.0}, {"step": steps, "bleu": 25.456}],
        "test": {"t": {"bleu": test_bleu, "chrf": 50.0, "beam": 5}},
    }


def test_only_settings_that_differ_are_columns_and_the_data_location_is_none():
    configs = [
        {"trainer": {"lr": 1e-3, "seed": 1, "betas": [0.9, 0.98]}, "data": {"url": "a"}},
        {"trainer": {"lr": 2e-3, "seed": 1, "betas": [0.9, 0.98]}, "data": {"url": "b"}},
        {"trainer": {"lr": 2e-3, "seed": 1}, "data": {"url": "c"}},
    ]
    assert differing_settings([flat_settings(config) for config in configs]) == [
        "trainer.betas",
        "trainer.lr",
    ]


def test_a_row_per_run_in_order_with_its_settings_validations_and_test_scores():
    runs = {"base": metrics(1e-3, "a", 822, 33.97), "fast": metrics(2e-3, "b", 810, 37.5)}
    header, rule, base, fast = budget_table(runs)
    assert header == "| run | trainer.lr | updates | val BLEU (step) | t BLEU / chrF |"
    assert rule == "| --- | --- | --- | --- | --- |"
    assert base == "| base | 0.001 | 822 | 20.00 (500), 25.46 (822) | 33.97 / 50.00 (beam 5) |"
    assert fast.startswith("| fast | 0.002 | 810 |") and "37.50" in fast


def test_the_script_names_rows_after_files_and_directories(tmp_path):
    (tmp_path / "run_b").mkdir()
    (tmp_path / "run_b" / "metrics.json").write_text(json.dumps(metrics(2e-3, "b", 810, 37.5)))
    (tmp_path / "base_metrics.json").write_text(json.dumps(metrics(1e-3, "a", 822, 33.97)))
    runs = f"runs=[{tmp_path / 'base_metrics.json'},{tmp_path / 'run_b'}]"
    result = run_script("bench/budget_table.py", runs, stdin="")
    assert result.returncode == 0, result.stderr
    names = [line.split(" | ")[0] for line in result.stdout.splitlines()[2:]]
    assert names == ["| base", "| run_b"]


def test_the_script_names_an_unreadable_entry(tmp_path):
    absent = f"runs=[{tmp_path / 'absent'}]"
    result = run_script("bench/budget_table.py", absent, stdin="")
    assert result.returncode != 0 and "absent" in result.stderr
