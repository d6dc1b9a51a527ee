"""Keep the runs a GPU call brought back: its archive's finished runs into the study's runs.

    python scripts/gpu/unpack.py archive=/work/.device/<...>/study_runs.tar.gz
    python scripts/gpu/unpack.py archive=study_runs.tar.gz dest=/tmp/runs

Extracts the archive (scripts/gpu/study_runs.sh packs it) into a temporary folder and copies
each finished run in it to <dest>/<configuration>/seed<k>/ with the study's collect_runs, as
scripts/collect_runs.py does: a run already there with the same files is left alone, one that
differs (a capped run now trained to convergence) is replaced, with a warning. Prints each run's
status, then the call's summary table. The next call of study_runs.sh leaves out what is here.
Then: python scripts/report.py sweep=<dest>
"""

import sys
import tarfile
import tempfile
from pathlib import Path

from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.study.collect import collect_runs

DEFAULTS = {"archive": "???", "dest": "docs/study/runs"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    archive = Path(args.archive)
    if not archive.is_file():
        sys.exit(f"error: archive={archive} is not a file")
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(archive) as tar:
        tar.extractall(tmp, filter="data")
        runs = Path(tmp) / "runs"
        done = collect_runs(runs, Path(args.dest)) if runs.is_dir() else []
        for target, status in done:
            print(f"{status:9} {target}")
        print(f"{len(done)} finished runs in {archive.name}")
        summary = Path(tmp) / "summary.txt"
        if summary.is_file():
            print(summary.read_text(), end="")


if __name__ == "__main__":
    main(sys.argv[1:])
