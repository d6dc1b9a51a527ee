"""Collecting a sweep's finished runs into one folder per configuration and seed
(docs/study/runs): the files a run is reported from, nothing else."""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

from minimt.study.runs import Run, load_sweep

log = logging.getLogger(__name__)


def collected_dir(dest: Path, run: Run) -> Path:
    """Where collect_runs keeps a run: DEST/<configuration slug>/seed<k>."""
    return dest / run.configuration.slug / f"seed{run.seed}"


def is_collected(sweep_dir: Path, runs: list[Run]) -> bool:
    """Whether every run sits where collect_runs puts it under `sweep_dir`."""
    return all(run.dir == collected_dir(sweep_dir, run) for run in runs)


def collected_files(run: Run) -> dict[str, bytes]:
    """The files collect_runs keeps of a run: metrics.json, config.yaml (its resolved config)
    and hyps.*.txt (the test hypotheses)."""
    files = {
        "metrics.json": (run.dir / "metrics.json").read_bytes(),
        "config.yaml": OmegaConf.to_yaml(run.config).encode("utf-8"),
    }
    for path in sorted(run.dir.glob("hyps.*.txt")):
        files[path.name] = path.read_bytes()
    return files


def collect_runs(sweep_dir: Path, dest: Path) -> list[tuple[Path, str]]:
    """Copy each finished run under `sweep_dir` into collected_dir(dest, run); returns
    (destination, "copied" | "unchanged" | "replaced") per run. A run already there with the
    same files is left alone; one whose files differ is replaced, with a warning."""
    done = []
    for run in load_sweep(sweep_dir).runs:
        target, files = collected_dir(dest, run), collected_files(run)
        present = _kept_files(target)
        if present == files:
            done.append((target, "unchanged"))
            continue
        if present:
            log.warning("%s differs from %s: replacing it", target, run.dir)
            for name in present:
                (target / name).unlink()
        target.mkdir(parents=True, exist_ok=True)
        for name, content in files.items():
            (target / name).write_bytes(content)
        done.append((target, "replaced" if present else "copied"))
    return done


def _kept_files(target: Path) -> dict[str, bytes]:
    if not target.is_dir():
        return {}
    names = ("metrics.json", "config.yaml")
    return {
        p.name: p.read_bytes()
        for p in sorted(target.iterdir())
        if p.name in names or (p.name.startswith("hyps.") and p.name.endswith(".txt"))
    }
