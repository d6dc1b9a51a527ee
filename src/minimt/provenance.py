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


def cpu_info() -> dict[str, str]:
    """The first processor's fields in /proc/cpuinfo ("model name", "cpu family", "model",
    "vendor_id", ...); {} where there is no such file."""
    info: dict[str, str] = {}
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition(":")
            info.setdefault(key.strip(), value.strip())
    return info


def machine_name(device: torch.device) -> str:
    """The GPU's name on CUDA. On a CPU its model name (else the platform's processor string,
    else "unknown") with its family and model and the kernel set torch runs on it, as fp32 sums
    differ between kernel sets: "AMD EPYC (family 25, model 1; torch's AVX2 kernels)"."""
    if device.type == "cuda":
        return device_name(device)
    info = cpu_info()
    name = info.get("model name") or platform.processor() or "unknown"
    details = [f"torch's {torch.backends.cpu.get_cpu_capability()} kernels"]
    if info.get("cpu family") and info.get("model"):
        details.insert(0, f"family {info['cpu family']}, model {info['model']}")
    return f"{name} ({'; '.join(details)})"


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
