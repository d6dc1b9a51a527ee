"""The GPU calls' helpers (scripts/gpu): what summarize.py reads off a run's log and
nvidia-smi's samples, and what agenda.py leaves out. The calls themselves are dry-run on a CPU
(docs/gpu-lease.md)."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO


def script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / "gpu" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


summarize = script("summarize")


def test_the_steady_rate_leaves_out_the_first_interval(tmp_path):
    """Steps 50 -> 100 -> 200 at 0 s, 60 s (compilation), 70 s: 100 updates in 10 s."""
    (tmp_path / "train.log").write_text(
        "[2026-11-24 08:00:00,000][minimt.train.progress][INFO] - model: 7,600,000 parameters\n"
        "[2026-11-24 08:00:00,000][minimt.train.progress][INFO] - step 50 | epoch 1 | loss 7.9\n"
        "[2026-11-24 08:01:00,000][minimt.train.progress][INFO] - step 100 | epoch 1 | loss 6.1\n"
        "[2026-11-24 08:01:10,000][minimt.train.progress][INFO] - step 200 | epoch 2 | loss 5.2\n"
    )
    run = summarize.run_summary(tmp_path)
    assert run["steps"] == 200 and not run["finished"]
    assert run["updates_per_s"] == pytest.approx(10.0)


def test_nvidia_smi_samples_or_their_absence(tmp_path):
    samples = tmp_path / "a.nvidia-smi.csv"
    samples.write_text(
        "2026/11/24 08:00:00.000, 40 %, 1000 MiB\n2026/11/24 08:00:05.000, 80 %, 3000 MiB\n"
    )
    absent = tmp_path / "b.nvidia-smi.csv"
    absent.write_text("absent\n")
    assert summarize.gpu_samples(samples) == {
        "samples": 2,
        "utilization_mean": 60.0,
        "utilization_max": 80.0,
        "memory_max_mib": 3000.0,
    }
    assert summarize.gpu_samples(absent) == {"samples": 0, "note": "absent"}


def collect(run: str, collected: Path, stop_reason: str | None = None) -> None:
    """A committed run of docs/study/runs copied into `collected`, its stop_reason replaced."""
    source = REPO / "docs" / "study" / "runs" / run
    shutil.copytree(source, collected / run)
    if stop_reason is not None:
        metrics = json.loads((source / "metrics.json").read_text())
        (collected / run / "metrics.json").write_text(
            json.dumps(metrics | {"stop_reason": stop_reason})
        )


def test_the_agenda_leaves_out_finished_and_converged_runs_but_not_capped_ones(tmp_path):
    agenda = tmp_path / "agenda.txt"
    agenda.write_text(
        "# comment\nstudy full_rope 1\nstudy full_rope 2  # here\nstudy full_rope 3\n"
        "length_split length_alibi 1\n"
    )
    results, collected = tmp_path / "results", tmp_path / "collected"
    (results / "study" / "full_rope" / "seed3").mkdir(parents=True)
    (results / "study" / "full_rope" / "seed3" / "metrics.json").write_text("{}")
    collect("full-rope/seed1", collected, "trainer.patience reached")
    collect("length15-alibi/seed1", collected, "trainer.max_minutes reached")
    pending = subprocess.run(
        [
            sys.executable,
            "scripts/gpu/agenda.py",
            f"agenda={agenda}",
            f"results={results}",
            f"collected={collected}",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    # seed 1 converged, seed 3 finished in results; seed 2 is not there; the alibi run was capped
    assert pending == ["study full_rope 2", "length_split length_alibi 1"]
