"""Keep a sweep's finished runs as data: metrics.json, the resolved config and test hypotheses.

    python scripts/collect_runs.py sweep=multirun/2026-11-21/10-00-00
    python scripts/collect_runs.py sweep=DIR dest=docs/study/runs

Copies each run with a metrics.json into <dest>/<protocol>/<configuration>/seed<k>/ (metrics.json,
config.yaml); its hyps.*.txt go into <dest>/<protocol>/<configuration>/hypotheses.tar.xz, each
pinned by SHA-256 in metrics.json "hypotheses" (minimt.study.evidence). No record names one
machine's paths: Multi30k read from a local folder is recorded by its public URL (its files are
pinned by SHA-256), and an absolute data.dir or resume inside the project the run trained in,
relative to that project's root. Running it again changes nothing; a run already there whose
files differ is replaced, with a warning. Each file is written whole or not at all, the archive
first and metrics.json last: a copy stopped half-way (Ctrl-C, a full disk) is no collected run
until it runs again.
Then: python scripts/report.py sweep=<dest>
"""

import copy
import logging
import sys
from pathlib import Path

from omegaconf import OmegaConf

from minimt.atomic import WriteError, why_not_written, write_bytes
from minimt.checkpoint import json_text
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.data.multi30k import MULTI30K_URL, local_path
from minimt.errors import with_hint
from minimt.study.evidence import (
    PINS,
    archive_bytes,
    archive_of,
    pins,
    read_archive,
    run_members,
    with_run,
)
from minimt.study.runs import Run, collected_dir, load_sweep

log = logging.getLogger(__name__)

DEFAULTS = {"sweep": "???", "dest": "docs/study/runs"}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def kept_files(folder: Path) -> dict[str, bytes]:
    """The record files of the run in `folder`: metrics.json and config.yaml (those present)."""
    paths = [folder / "metrics.json", folder / "config.yaml"]
    return {path.name: path.read_bytes() for path in paths if path.is_file()}


def hypotheses(folder: Path) -> dict[str, bytes]:
    """{file name: bytes} of the test hypotheses the run in `folder` wrote (hyps.*.txt)."""
    return {path.name: path.read_bytes() for path in sorted(folder.glob("hyps.*.txt"))}


def project_root(folder: Path) -> Path | None:
    """The root of the git checkout or worktree holding `folder`, or None."""
    return next((p for p in [folder, *folder.parents] if (p / ".git").exists()), None)


def kept_config(config: dict, run_dir: Path) -> dict:
    """`config` without one machine's paths (the module docstring says how)."""
    kept = copy.deepcopy(config)
    data, root = kept.get("data", {}), project_root(run_dir.resolve())
    if data.get("name") == "multi30k" and local_path(data.get("url", "")) is not None:
        data["url"] = MULTI30K_URL
    for node, key in ((data, "dir"), (kept, "resume")):
        path = Path(node[key]) if node.get(key) else None
        if path is not None and path.is_absolute() and root and path.is_relative_to(root):
            node[key] = path.relative_to(root).as_posix()
    return kept


def recorded_files(run: Run, hyps: dict[str, bytes]) -> dict[str, bytes]:
    """The record files to keep for `run`: metrics.json as saved, with its config as kept_config
    writes it and `hyps` pinned under "hypotheses", and that config as config.yaml."""
    config = kept_config(run.record.get("config", run.metrics["config"]), run.dir)
    metrics = run.record | {"config": config, PINS: pins(hyps)}
    return {
        "metrics.json": json_text(metrics).encode(),
        "config.yaml": OmegaConf.to_yaml(OmegaConf.create(config)).encode(),
    }


def collect_runs(sweep_dir: Path, dest: Path) -> list[tuple[Path, str]]:
    """Copy each finished run under `sweep_dir` to collected_dir(dest, run): its record files
    (recorded_files) and its hypotheses into its configuration's archive; returns (destination,
    "copied" | "unchanged" | "replaced") per run. A run whose files differ is replaced, with a
    warning."""
    done = []
    for run in load_sweep(sweep_dir)[0]:
        target = collected_dir(dest, run)
        hyps = hypotheses(run.dir)
        files = recorded_files(run, hyps)
        archive = read_archive(archive_of(target))
        present = kept_files(target)
        loose = sorted(target.glob("hyps.*.txt"))  # kept beside the record before the archive
        if present == files and run_members(archive, target) == hyps and not loose:
            done.append((target, "unchanged"))
            continue
        if present:
            log.warning("%s differs from %s: replacing it", target, run.dir)
        note = (
            f"{target} has no metrics.json until collect_runs.py runs again; the other runs in "
            f"{dest} are intact"
        )
        with with_hint(note, WriteError):
            copy_files(target, files, with_run(archive, target, hyps), stale=loose)
        done.append((target, "replaced" if present else "copied"))
    return done


def copy_files(
    target: Path, files: dict[str, bytes], archive: dict[str, bytes], *, stale: list[Path]
) -> None:
    """Write `archive` to the configuration's archive, delete the `stale` files of `target` (what
    the archive now holds) and write `files` there, each atomically. metrics.json, which makes
    the folder a finished run, goes first and comes back last."""
    remove(target / "metrics.json")
    write_bytes(archive_of(target), archive_bytes(archive))
    for path in stale:
        remove(path)
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
