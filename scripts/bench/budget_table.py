"""Runs on the same time budget side by side, as a markdown table (docs/performance.md's levers).

    python scripts/train.py trainer.max_minutes=30 hydra.run.dir=outputs/perf30
    python scripts/train.py trainer.max_minutes=30 trainer.lr=2e-3 hydra.run.dir=outputs/lr2e-3
    python scripts/bench/budget_table.py runs=[outputs/perf30,outputs/lr2e-3]

Each entry of `runs` is a run directory or a metrics.json file; a row is named after the
directory, or after the file with its _metrics.json ending cut. Columns: the settings that differ
between the runs (read from each metrics.json's config), updates, greedy val BLEU at each
validation and each test set's beam-search BLEU and chrF.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path

from minimt.cli import one_line_errors, parse_args
from minimt.migrations import upgraded

DEFAULTS = {"runs": "???"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
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


def read_metrics(entry: str) -> tuple[str, dict]:
    """A run directory or metrics.json path -> (row name, its metrics in today's run format)."""
    path = Path(entry)
    if path.is_dir():
        name, path = path.name, path / "metrics.json"
    else:
        name = path.name.removesuffix("metrics.json").removesuffix("_") or path.parent.name
    try:
        return name, upgraded(json.loads(path.read_text()))
    except (OSError, ValueError) as error:
        sys.exit(f"error: {path} is not a readable metrics.json of a finished run ({error!r})")


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    runs = dict(read_metrics(entry) for entry in args.runs)
    try:
        print("\n".join(budget_table(runs)))
    except KeyError as error:
        sys.exit(f"error: a metrics.json lacks {error} (runs that finished training have it)")


if __name__ == "__main__":
    main(sys.argv[1:])
