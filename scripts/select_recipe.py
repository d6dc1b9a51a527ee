"""Choose the next default recipe from the selection's runs, by the plan in docs/results.md.

    python scripts/select_recipe.py sweep=multirun/recipe
    python scripts/select_recipe.py sweep=docs/recipe/runs       # writes docs/recipe/selection.md

Reads every finished run under `sweep` (scored on validation by
`python scripts/evaluate.py run=RUN average=5 split=[val] beam=[1]` for its averaged candidate),
prints the selection (each seed's block with its machine and updates, each candidate's greedy
validation BLEU per seed and mean, the choice or what it still waits for) and writes it to
`out` (default: selection.md in the sweep directory, or beside it for collected runs), whole or
not at all. The test sets are never read.
"""

import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args, publish, setup_logging
from minimt.study.recipe import select, selection_text
from minimt.study.runs import findings_dir, load_sweep

DEFAULTS = {"sweep": "???", "out": None}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    sweep = Path(args.sweep)
    runs, _ = load_sweep(sweep)
    if not runs:
        sys.exit(f"error: no finished run under {sweep}: train them first (docs/results.md)")
    text = selection_text(select(runs), args.sweep)
    out = Path(args.out) if args.out else findings_dir(sweep, runs) / "selection.md"
    publish(text, out)


if __name__ == "__main__":
    main(sys.argv[1:])
