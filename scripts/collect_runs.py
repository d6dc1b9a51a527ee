"""Keep a sweep's finished runs as data: metrics.json, the resolved config and test hypotheses.

    python scripts/collect_runs.py sweep=multirun/2026-11-21/10-00-00
    python scripts/collect_runs.py sweep=DIR dest=docs/study/runs

Copies each run with a metrics.json into <dest>/<protocol>/<configuration>/seed<k>/ (metrics.json,
config.yaml, hyps.*.txt). Running it again changes nothing; a run already there whose files
differ is replaced, with a warning. Each file is written whole or not at all, metrics.json last:
a copy stopped half-way (Ctrl-C, a full disk) is no collected run until it runs again.
Then: python scripts/report.py sweep=<dest>
"""

import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from minimt.atomic import WriteError, noting_what_is_intact, why_not_written, write_bytes
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.study.runs import collected_dir, load_sweep

log = logging.getLogger(__name__)

DEFAULTS = {"sweep": "???", "dest": "docs/study/runs"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def kept_files(folder: Path) -> dict[str, bytes]:
    """The files a collected run keeps: metrics.json, config.yaml and hyps.*.txt (those present)."""
    paths = [folder / "metrics.json", folder / "config.yaml", *sorted(folder.glob("hyps.*.txt"))]
    return {path.name: path.read_bytes() for path in paths if path.is_file()}


def collect_runs(sweep_dir: Path, dest: Path) -> list[tuple[Path, str]]:
    """Copy each finished run under `sweep_dir` to collected_dir(dest, run), with its resolved
    config as config.yaml; returns (destination, "copied" | "unchanged" | "replaced") per run. A
    run whose files differ is replaced, with a warning."""
    done = []
    for run in load_sweep(sweep_dir)[0]:
        target = collected_dir(dest, run)
        files = kept_files(run.dir) | {"config.yaml": OmegaConf.to_yaml(run.config).encode()}
        present = kept_files(target)
        if present == files:
            done.append((target, "unchanged"))
            continue
        if present:
            log.warning("%s differs from %s: replacing it", target, run.dir)
        note = (
            f"{target} has no metrics.json until collect_runs.py runs again; the other runs in "
            f"{dest} are intact"
        )
        with noting_what_is_intact(note):
            copy_files(target, files, stale=present.keys() - files.keys())
        done.append((target, "replaced" if present else "copied"))
    return done


def copy_files(target: Path, files: dict[str, bytes], *, stale: set[str]) -> None:
    """Delete the `stale` files of `target` and write `files` there, each atomically.
    metrics.json, which makes the folder a finished run, goes first and comes back last."""
    for name in ["metrics.json", *stale]:
        remove(target / name)
    for name in sorted(files, key=lambda name: name == "metrics.json"):
        write_bytes(target / name, files[name])


def remove(path: Path) -> None:
    """Delete `path` if it is there; a failure (a read-only folder) is a WriteError naming it."""
    try:
        path.unlink(missing_ok=True)
    except OSError as error:
        raise WriteError(f"could not remove {path}: {why_not_written(error, path)}") from error


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
