"""What the runs of a GPU call did, for summary.json and the table at the end of its output.

    python scripts/gpu/summarize.py RESULTS SUBDIR...   # e.g. /tmp/minimt_gpu probe

Every run directory below RESULTS/SUBDIR (one holding stdout.log, as scripts/gpu/lib.sh makes
them) is read: its steps and steady updates/s from train.log's step lines (the first one left
out: it holds start-up and compilation), and from metrics.json where it finished: why it
stopped, the device, steps / train_seconds. Runs are grouped by their parent folder (a probe case,
or an arm); a group's updates/s are summed, since its runs trained at the same time. The
nvidia-smi samples (RESULTS/*.nvidia-smi.csv) give mean and peak utilisation and peak memory.
Writes RESULTS/summary.json and prints a table.
"""

from __future__ import annotations

import json
import re
import sys
from datetime import datetime
from pathlib import Path

# Hydra's log line: [2026-11-24 08:03:31,765][minimt.train.progress][INFO] - step 50 | epoch 1 | ...
STEP_LINE = re.compile(r"^\[([\d-]+ [\d:]+,\d+)\]\[minimt\.train\.progress\]\[INFO\] - step (\d+) ")


def step_times(log: Path) -> list[tuple[float, int]]:
    """(seconds since the epoch, step) of each log line a run wrote every trainer.log_every."""
    points = []
    if log.is_file():
        for line in log.read_text(errors="replace").splitlines():
            if match := STEP_LINE.match(line):
                when = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
                points.append((when, int(match[2])))
    return points


def run_summary(run_dir: Path) -> dict:
    points = step_times(run_dir / "train.log")
    rate = None
    if len(points) >= 3:  # the first interval holds start-up and compilation
        (t0, s0), (t1, s1) = points[1], points[-1]
        rate = (s1 - s0) / (t1 - t0) if t1 > t0 else None
    summary = {"steps": points[-1][1] if points else 0, "updates_per_s": rate}
    metrics_file = run_dir / "metrics.json"
    if metrics_file.is_file():
        metrics = json.loads(metrics_file.read_text())
        tests = metrics.get("test") or {}
        summary |= {
            "finished": True,
            "steps": metrics["steps"],
            "stop_reason": metrics["stop_reason"],
            "device": metrics.get("device"),
            "train_seconds": metrics["train_seconds"],
            "updates_per_s_overall": metrics["steps"] / max(metrics["train_seconds"], 1e-9),
            "test_bleu": next(iter(tests.values()))["bleu"] if tests else None,
        }
    else:
        summary["finished"] = False
    return summary


def gpu_samples(csv: Path) -> dict:
    """Mean and peak utilisation (%) and peak memory (MiB) of nvidia-smi's samples, or absent."""
    util, memory = [], []
    for line in csv.read_text(errors="replace").splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 3 and fields[1].endswith("%"):
            util.append(float(fields[1].rstrip(" %")))
            memory.append(float(fields[2].split()[0]))
    if not util:
        return {"samples": 0, "note": csv.read_text(errors="replace").strip()[:200] or "empty"}
    return {
        "samples": len(util),
        "utilization_mean": sum(util) / len(util),
        "utilization_max": max(util),
        "memory_max_mib": max(memory),
    }


def summarize(results: Path, subdirs: list[str]) -> dict:
    runs = {}
    for subdir in subdirs:
        for stdout in sorted((results / subdir).rglob("stdout.log")):
            runs[str(stdout.parent.relative_to(results))] = run_summary(stdout.parent)
    groups: dict[str, dict] = {}
    for name, run in runs.items():
        group = groups.setdefault(
            str(Path(name).parent), {"runs": 0, "finished": 0, "steps": 0, "updates_per_s": 0.0}
        )
        group["runs"] += 1
        group["finished"] += run["finished"]
        group["steps"] += run["steps"]
        group["updates_per_s"] += run["updates_per_s"] or 0.0
    gpu = {p.name: gpu_samples(p) for p in sorted(results.glob("*.nvidia-smi.csv"))}
    return {"groups": groups, "gpu": gpu, "runs": runs}


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    results = Path(argv[0])
    summary = summarize(results, argv[1:])
    (results / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(f"{'group':50} {'runs':>4} {'done':>4} {'steps':>7} {'updates/s (sum)':>15}")
    for name, group in summary["groups"].items():
        print(
            f"{name:50} {group['runs']:>4} {group['finished']:>4} {group['steps']:>7} "
            f"{group['updates_per_s']:>15.2f}"
        )
    for name, gpu in summary["gpu"].items():
        print(f"{name}: {json.dumps(gpu)}")


if __name__ == "__main__":
    main(sys.argv[1:])
