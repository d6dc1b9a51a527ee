"""Runs trained on the same time budget, side by side: the settings that differ between them, the
updates each made, its greedy validation BLEU along the way and its test scores at the end (the
lever tables of docs/performance.md)."""

from __future__ import annotations

from collections.abc import Mapping

# Where a run read its data from, or what it resumed: never a setting that changes the model.
NOT_SETTINGS = ("data.url", "data.dir", "resume")


def flat_settings(config: Mapping, prefix: str = "") -> dict[str, object]:
    """A run's nested config -> {"trainer.lr": 0.001, ...}, lists kept as values."""
    flat: dict[str, object] = {}
    for key, value in config.items():
        if isinstance(value, Mapping):
            flat.update(flat_settings(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def differing_settings(flats: list[Mapping[str, object]]) -> list[str]:
    """The settings whose values are not the same in all of flats (flat_settings of each run's
    config; a missing one reads as None)."""
    keys = sorted({key for flat in flats for key in flat} - set(NOT_SETTINGS))
    return [key for key in keys if len({repr(flat.get(key)) for flat in flats}) > 1]


def budget_table(runs: Mapping[str, Mapping]) -> list[str]:
    """{name: metrics.json of a run} -> a markdown table, one row per run, in the given order.

    Columns: the settings that differ between the runs, updates, greedy val BLEU at each
    validation (its step in brackets), and each test set's BLEU and chrF with its beam size.
    """
    flats = {name: flat_settings(metrics["config"]) for name, metrics in runs.items()}
    settings = differing_settings(list(flats.values()))
    test_sets = sorted({name for metrics in runs.values() for name in metrics["test"]})
    header = ["run", *settings, "updates", "val BLEU (step)"]
    header += [f"{name} BLEU / chrF" for name in test_sets]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, metrics in runs.items():
        validations = ", ".join(f"{v['bleu']:.2f} ({v['step']})" for v in metrics["val_history"])
        cells = [name, *(str(flats[name].get(key, "-")) for key in settings)]
        cells += [f"{metrics['steps']:,}", validations]
        cells += [score_cell(metrics["test"].get(test_set)) for test_set in test_sets]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def score_cell(score: Mapping | None) -> str:
    """A test set's record in metrics.json -> 'BLEU / chrF (beam k)', '-' where not scored."""
    if score is None:
        return "-"
    return f"{score['bleu']:.2f} / {score['chrf']:.2f} (beam {score['beam']})"
