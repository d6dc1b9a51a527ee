"""Runs on the same time budget side by side, as a markdown table (docs/performance.md's levers).

    python scripts/train.py trainer.max_minutes=30 hydra.run.dir=outputs/perf30
    python scripts/train.py trainer.max_minutes=30 trainer.lr=2e-3 hydra.run.dir=outputs/lr2e-3
    python scripts/budget_table.py runs=[outputs/perf30,outputs/lr2e-3]

Each entry of `runs` is a run directory or a metrics.json file; a row is named after the
directory, or after the file with its _metrics.json ending cut. Columns: the settings that differ
between the runs (read from each metrics.json's config), updates, greedy val BLEU at each
validation and each test set's beam-search BLEU and chrF.

The body is minimt.bench.budget_runs.
"""

import json
import sys
from pathlib import Path

from minimt.bench.budget_runs import budget_table
from minimt.cli import one_line_errors, parse_args

DEFAULTS = {"runs": "???"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def read_metrics(entry: str) -> tuple[str, dict]:
    """A run directory or metrics.json path -> (row name, its metrics)."""
    path = Path(entry)
    if path.is_dir():
        name, path = path.name, path / "metrics.json"
    else:
        name = path.name.removesuffix("metrics.json").removesuffix("_") or path.parent.name
    try:
        return name, json.loads(path.read_text())
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
