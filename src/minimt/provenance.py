"""Where, when and from what a run trained: the machine, torch, its threads, the source commit,
and UTC wall-clock times (metrics.json "provenance"), so that a reader can tell runs of two
machines apart and check that a plan preceded the runs it governs."""

from __future__ import annotations

import contextlib
import platform
import subprocess
from datetime import datetime, timezone
from pathlib import Path

import torch

from minimt.runtime import device_name

SOURCE_DIR = Path(__file__).resolve().parent


def utc_now() -> str:
    """The time now, UTC, to the second: 2026-11-27T08:40:12Z."""
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def machine_name(device: torch.device) -> str:
    """The GPU's name on CUDA, else the CPU's model name (/proc/cpuinfo), else the platform's
    processor string, else "unknown"."""
    if device.type == "cuda":
        return device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and value.strip():
                return value.strip()
    return platform.processor() or "unknown"


def source_commit(source_dir: Path = SOURCE_DIR) -> str | None:
    """The git commit the code in `source_dir` was checked out at, with "+dirty" where tracked
    files differ from it; None outside a git checkout (an installed wheel)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(source_dir), *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def session(device: torch.device) -> dict[str, object]:
    """One training session (a run's start, or a resume): when it started, on what."""
    return {
        "started_utc": utc_now(),
        "machine": machine_name(device),
        "torch": str(torch.__version__),
        "num_threads": torch.get_num_threads(),
        "commit": source_commit(),
    }


def provenance(sessions: list[dict[str, object]]) -> dict[str, object]:
    """metrics.json "provenance": the latest session's machine, torch, threads and commit, the
    first session's start and the end of training (now), and every session where the run was
    resumed (a resume may run on another machine)."""
    last = sessions[-1]
    summary = {key: last[key] for key in ("machine", "torch", "num_threads", "commit")}
    summary |= {"started_utc": sessions[0]["started_utc"], "ended_utc": utc_now()}
    return summary | {"sessions": sessions}
