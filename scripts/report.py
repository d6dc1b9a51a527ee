"""Answer the study's questions from its runs: verdicts, length buckets, plots.

    python scripts/report.py sweep=multirun/2026-11-21/10-00-00
    python scripts/report.py sweep=docs/study/runs              # writes docs/study/report.md
    python scripts/report.py sweep=DIR test_set=test_2017_flickr out=DIR
    python scripts/report.py sweep=DIR margin=0.5 alpha=0.01 power=0.9
    python scripts/report.py sweep=DIR reference=full_rope
    python scripts/report.py sweep=DIR plans=my_configs/plan

Reads every run under `sweep` (metrics.json with its "config" and "choices"), prints the
configuration table and writes report.md, report.csv and PNG plots into `out`: by default the
sweep directory, or for collected runs (scripts/collect_runs.py) the directory above them.
`test_set` (default: the first run's first that is not a long_* set) is the headline test set.
`alpha`, `margin` (BLEU) and `power` are the verdict protocol's settings (defaults:
minimt.study.significance.Rules; docs/study.md says where the margin comes from). The questions
come from the plan files in `plans` (default: configs/plan; docs/plans.md). An arm that no
plan covers (your own, from an arm file of your config folder) is compared with the
`reference` arm (default full_sinusoidal) seed by seed, as an exploratory family. Runs without
metrics.json are listed as skipped. Each file is written whole or not at all (a temp file renamed).
"""

import sys
from pathlib import Path

from minimt.atomic import WriteError
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.errors import with_hint
from minimt.study.answers import REFERENCE
from minimt.study.markdown import configuration_table
from minimt.study.plan import load_plans
from minimt.study.report import build_report, write_report
from minimt.study.significance import Rules

RULES = Rules()
DEFAULTS = {
    "sweep": "???",
    "test_set": None,
    "out": None,
    "alpha": RULES.alpha,
    "margin": RULES.margin,
    "power": RULES.power,
    "reference": REFERENCE,
    "plans": str(Path(__file__).resolve().parents[1] / "configs" / "plan"),
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    rules = Rules(args.alpha, args.margin, args.power)
    plans = load_plans(Path(args.plans))
    report = build_report(
        args.sweep, args.test_set, args.out, rules, plans=plans, reference=args.reference
    )
    intact = (
        f"each file in {report.out_dir} is its previous version or its new one, none half-written"
    )
    with with_hint(intact, WriteError):
        paths = write_report(report)
    print(configuration_table(report.rows))
    for path in paths:
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
