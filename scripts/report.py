"""Compare the embedding configurations of a sweep: a table, significance, length behaviour.

    python scripts/report.py sweep=multirun/2026-11-21/10-00-00
    python scripts/report.py sweep=DIR test_set=test_2017_flickr bootstrap=2000

Reads every run under `sweep` (metrics.json with its "config", hyps.<test_set>.txt, TensorBoard
events), prints the table and writes report.md, report.csv, val_bleu.png, test_bleu.png and
bleu_by_length.png into `sweep`. Runs without metrics.json are listed as skipped.
"""

import sys

from minimt.cli import parse_args, setup_logging
from minimt.study.report import ReportError, build_report, configuration_table, write_report

DEFAULTS = {"sweep": "???", "test_set": "test_2016_flickr", "bootstrap": 1000}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    try:
        report = build_report(args.sweep, args.test_set, args.bootstrap)
    except ReportError as error:
        sys.exit(f"error: {error}")
    paths = write_report(report)
    print(configuration_table(report.rows))
    for path in paths:
        print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])
