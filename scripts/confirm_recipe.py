"""Read the confirmation of the recipe selection's choice, by the plan in docs/results.md.

    python scripts/confirm_recipe.py sweep=multirun/confirm slow=multirun/confirm_slow
    python scripts/confirm_recipe.py sweep=docs/recipe/confirmation_runs slow=docs/recipe/slow_runs

Takes the choice and the planned seed pairs from the selection's runs (`selection`, default
docs/recipe/runs), pairs the finished runs under `sweep` by seed (today's recipe and the chosen
one, on one machine) and the slow pair under `slow` (trainer.max_steps=850), and writes the
confirmation to `out` (default: confirmation.md in the sweep directory, or beside it for
collected runs), whole or not at all. Until every planned pair, the slow pair and the chosen runs'
averaged val scores are in, it shows what trained and no test figure (one look); then the
verdict on test_2016_flickr, the secondary test sets, the gates on speed and the decision, and
(exploratory) the chosen candidate's two changes apart where both arms scored their averages.
"""

import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args, publish, setup_logging
from minimt.study.confirmation import confirm, confirmation_text
from minimt.study.recipe import select
from minimt.study.runs import findings_dir, load_sweep

DEFAULTS = {"sweep": "???", "slow": "???", "selection": "docs/recipe/runs", "out": None}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    sweep = Path(args.sweep)
    selection_runs, _ = load_sweep(Path(args.selection))
    if not selection_runs:
        sys.exit(f"error: no finished run of the selection under {args.selection}")
    runs, _ = load_sweep(sweep)
    if not runs:
        sys.exit(
            f"error: no finished run under {sweep}: train the first pair first (docs/results.md)"
        )
    slow_runs, _ = load_sweep(Path(args.slow))
    confirmation = confirm(select(selection_runs), runs, slow_runs)
    text = confirmation_text(confirmation, args.sweep, args.slow)
    out = Path(args.out) if args.out else findings_dir(sweep, runs) / "confirmation.md"
    publish(text, out)


if __name__ == "__main__":
    main(sys.argv[1:])
