"""Where, when and from what a run trained: the machine (its CPU's vendor, family, model and the
kernel set torch runs on it, or its GPU), the environment variables that change numerics, torch,
its threads, the source commit and UTC wall-clock times (metrics.json "provenance"), so that a
reader can tell runs of two machines apart and check that a plan preceded the runs it governs.

A run started by a plan (scripts/study.py) carries the plan's hash in each of its sessions, from
the PLAN_VARIABLE the plan runner sets for the runs it starts.

Every start of a run, and every resume, is also appended to the run directory's starts.json, so
that a start restarted from update 0 in the same directory stays on record."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import subprocess
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import torch

from minimt import __version__
from minimt.atomic import write_text
from minimt.runtime import device_name

SOURCE_DIR = Path(__file__).resolve().parent
STARTS_FILE = "starts.json"
# Environment variables that pick kernels, threads or floating-point modes: runs that differ in
# one of them need not match bit for bit.
NUMERICS_VARIABLES = ("TORCH_ALLOW_TF32_CUBLAS_OVERRIDE", "NVIDIA_TF32_OVERRIDE")
NUMERICS_PREFIXES = ("ATEN_", "OMP_", "MKL_", "KMP_", "ONEDNN_", "DNNL_", "OPENBLAS_", "CUBLAS_")
PLAN_VARIABLE = "MINIMT_PLAN"  # the hash of the plan that started the run (minimt.study.runner)


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


def cpu() -> dict[str, object]:
    """This CPU: vendor, family, model (integers), model name (else the platform's processor
    string, else "unknown") and the kernel set torch runs on it, as fp32 sums differ between
    kernel sets."""
    info = cpu_info()
    record: dict[str, object] = {"vendor": info.get("vendor_id")}
    for field, key in (("family", "cpu family"), ("model", "model")):
        record[field] = int(info[key]) if info.get(key, "").isdigit() else None
    record["model_name"] = info.get("model name") or platform.processor() or "unknown"
    record["kernels"] = torch.backends.cpu.get_cpu_capability()
    return record


def numerics_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The set environment variables (of `environ`, else this process's) that change numerics."""
    environ = os.environ if environ is None else environ
    return {
        name: value
        for name, value in sorted(environ.items())
        if name in NUMERICS_VARIABLES or name.startswith(NUMERICS_PREFIXES)
    }


def describe_machine(record: dict) -> str:
    """A session's (or a record's) machine in words, from its structured fields: the GPU's name,
    or the CPU's model name with what is known of its family, model and kernels, and a forced
    kernel set: "AMD EPYC (family 26, model 2; torch's AVX2 kernels, ATEN_CPU_CAPABILITY=avx2)".
    A record without them (an older run) keeps the "machine" it names, else "unrecorded"."""
    if record.get("gpu"):
        return str(record["gpu"])
    found = record.get("cpu")
    if not found:
        return str(record.get("machine") or "unrecorded")
    details = []
    if found.get("family") is not None and found.get("model") is not None:
        details.append(f"family {found['family']}, model {found['model']}")
    kernels = [f"torch's {found['kernels']} kernels"] if found.get("kernels") else []
    forced = record.get("environment", {}).get("ATEN_CPU_CAPABILITY")
    kernels += [f"ATEN_CPU_CAPABILITY={forced}"] if forced else []
    details += [", ".join(kernels)] if kernels else []
    name = str(found.get("model_name") or "unknown")
    return f"{name} ({'; '.join(details)})" if details else name


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


@functools.cache
def loaded_commit() -> str | None:
    """source_commit() as this process first read it, at its first run's start: the code it runs
    was loaded then, so a sweep's later runs in the same process record that commit, not one
    made (or an edit begun) while the sweep trains."""
    return source_commit()


def session(device: torch.device, from_step: int = 0) -> dict[str, object]:
    """One training session (a run's start at update 0, or a resume at `from_step`): when it
    started, on what, with which numerics settings."""
    record: dict[str, object] = {"started_utc": utc_now(), "from_step": from_step}
    if device.type == "cuda":
        record["gpu"] = device_name(device)
    record |= {"cpu": cpu(), "environment": numerics_environment()}
    record |= {
        "machine": describe_machine(record),
        "torch": str(torch.__version__),
        "num_threads": torch.get_num_threads(),
        "commit": loaded_commit(),
        "minimt": __version__,
    }
    if plan := os.environ.get(PLAN_VARIABLE):
        record["plan"] = plan
    return record


SUMMARY_KEYS = ("machine", "cpu", "gpu", "environment", "torch", "num_threads", "commit")
SUMMARY_KEYS += ("minimt", "plan")


def provenance(sessions: list[dict[str, object]], starts: Sequence[dict] = ()) -> dict[str, object]:
    """metrics.json "provenance": the latest session's machine, environment, torch, threads and
    commit, the first session's start and the end of training (now), every session of the run
    (a resume may run on another machine), and the `starts` of its directory (starts.json) that
    led nowhere: a start whose updates a later start from update 0 replaced."""
    last = sessions[-1]
    summary = {key: last[key] for key in SUMMARY_KEYS if key in last}
    summary |= {"started_utc": sessions[0]["started_utc"], "ended_utc": utc_now()}
    return summary | {"sessions": sessions, "discarded_starts": unmatched(starts, sessions)}


def unmatched(starts: Sequence[dict], sessions: Sequence[dict]) -> list[dict]:
    """The `starts` left once each of the `sessions` has taken one start equal to it, in order.
    Counted, not looked up: two starts within one second on one machine are equal records, and
    the one a later start replaced must still be named."""
    left = list(sessions)
    discarded = []
    for start in starts:
        if start in left:
            left.remove(start)
        else:
            discarded.append(start)
    return discarded


def read_starts(run_dir: Path) -> list[dict]:
    """The sessions recorded in run_dir/starts.json, oldest first; [] where there is none (or
    where it is not a list: the record of starts is an aid, never a reason to stop)."""
    with contextlib.suppress(OSError, ValueError):
        starts = json.loads((run_dir / STARTS_FILE).read_bytes())
        if isinstance(starts, list):
            return [start for start in starts if isinstance(start, dict)]
    return []


def record_start(run_dir: Path, started: dict) -> None:
    """Append a session to run_dir/starts.json (written whole, so never half a list)."""
    starts = [*read_starts(run_dir), started]
    write_text(run_dir / STARTS_FILE, json.dumps(starts, indent=2) + "\n")
