"""The sweep-throughput measurement: its commands and its arithmetic (no runs)."""

import json
from pathlib import Path

import pytest

from tests.helpers import REPO, load_script

sweep_throughput = load_script("scripts/bench/sweep_throughput.py")
Setting, run_rates, summarize, sweep_command = (
    sweep_throughput.Setting,
    sweep_throughput.run_rates,
    sweep_throughput.summarize,
    sweep_throughput.sweep_command,
)


def test_a_setting_runs_its_jobs_at_once_with_one_seed_each():
    command = sweep_command(Setting(2), 3.0, Path("/out"), ["data.max_val_pairs=50"])
    assert "hydra/launcher=parallel" in command and "hydra.launcher.n_jobs=2" in command
    assert "trainer.seed=1,2" in command and "hydra.sweep.dir=/out/jobs2" in command
    assert command[1] == str(REPO / "scripts" / "train.py")
    assert not any(arg.startswith("trainer.num_threads") for arg in command)
    forced = sweep_command(Setting(2, threads=2), 3.0, Path("/out"), [])
    assert forced[-1] == "trainer.num_threads=2" and "hydra.sweep.dir=/out/jobs2_threads2" in forced


def test_throughput_is_summed_over_the_runs_and_compared_with_the_first_setting(tmp_path):
    for seed, (tokens, seconds) in enumerate([(3000, 2.0), (1000, 1.0)], start=1):
        run = tmp_path / f"seed{seed}"
        run.mkdir()
        (run / "metrics.json").write_text(
            json.dumps({"tgt_tokens": tokens, "train_seconds": seconds})
        )
    assert run_rates(tmp_path) == [1500.0, 1000.0]
    found = summarize({"one": [2000.0], "two": run_rates(tmp_path)})
    assert found["two"]["total_tokens_per_s"] == 2500.0
    assert found["two"]["vs_first"] == pytest.approx(1.25)
    assert found["one"]["vs_first"] == 1.0
