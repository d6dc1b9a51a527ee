"""Keep a sweep's finished runs as data: metrics.json, the resolved config and test hypotheses.

    python scripts/collect_runs.py sweep=multirun/2026-11-21/10-00-00
    python scripts/collect_runs.py sweep=DIR dest=docs/study/runs

Copies each run with a metrics.json into <dest>/<configuration>/seed<k>/ (metrics.json,
config.yaml, hyps.*.txt). Running it again changes nothing; a run already there whose files
differ is replaced, with a warning. Then: python scripts/report.py sweep=<dest>
"""

import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.study.runs import collect_runs

DEFAULTS = {"sweep": "???", "dest": "docs/study/runs"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    sweep = Path(args.sweep)
    if not sweep.is_dir():
        sys.exit(f"error: sweep={sweep} is not a directory")
    for target, status in collect_runs(sweep, Path(args.dest)):
        print(f"{status:9} {target}")


if __name__ == "__main__":
    main(sys.argv[1:])
