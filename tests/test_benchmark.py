"""What the benchmark computes: padding fractions, and the script end to end on the smoke config."""

import json
import subprocess
import sys

import numpy as np
import pytest

from tests.helpers import REPO, load_script

BENCHMARK = "scripts/bench/benchmark.py"
padding_fraction = load_script(BENCHMARK).padding_fraction


def test_padding_fraction_of_fabricated_batches():
    lengths = np.array([3, 5, 2, 4, 4])
    # batch 1: 3 rows padded to 5 -> 15 positions, 10 real; batch 2: 2 rows of 4, no padding
    assert padding_fraction(lengths, [[0, 1, 2], [3, 4]]) == 1 - (10 + 8) / (15 + 8)
    assert padding_fraction(lengths, [[3, 4]]) == 0.0


@pytest.mark.slow
def test_benchmark_runs_end_to_end_on_the_smoke_config(multi30k_dir, tmp_path):
    out = tmp_path / "bench"
    command = [
        sys.executable,
        str(REPO / BENCHMARK),
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={tmp_path / 'data'}",
        "benchmark.warmup_steps=2",
        "benchmark.windows=2",
        "benchmark.window_steps=3",
        "benchmark.matmul_size=512",
        "benchmark.repeats=1",
        "benchmark.decode_sentences=50",
        "benchmark.profile_steps=2",
        "benchmark.profile_sentences=10",
        f"hydra.run.dir={out}",
    ]
    subprocess.run(command, check=True, capture_output=True, timeout=300)
    report = json.loads((out / "benchmark.json").read_text())
    training = report["training"]
    assert training["tgt_tokens_per_s"] > 0 and 0 < training["mfu"] < 1
    assert training["model_flops_per_tgt_token"] > 0
    assert set(report["decoding"]["sentences_per_s"]) == {
        "greedy_cached",
        "greedy_uncached",
        "beam5_cached",
    }
    padding = report["padding_fraction"]
    assert 0 <= padding["tgt"] < padding["unsorted_tgt"] < 1 and report["peak_rss_mb"] > 0
    variants = report["variants"]
    assert set(variants) == {
        "config",
        "fp32",
        "adam_for_loop",
        "adam_foreach",
        "no_prefetch",
    }
    assert variants["fp32"]["change"] == {"trainer.precision": "fp32"}
    assert all(v["tgt_tokens_per_s"] > 0 for v in variants.values())
    assert report["matmul_peak_flops_per_s"][report["precision"]] > 0
    assert report["matmul_peak_flops_per_s"]["fp32"] > 0
    for part in ("training", "beam5_decoding"):
        ops = report["profile"][part]
        shares = [op["self_share"] for op in ops]
        assert len(ops) == 15 and shares == sorted(shares, reverse=True) and 0 < sum(shares) <= 1
    assert any(op["op"] in ("aten::mm", "aten::addmm") for op in report["profile"]["training"])


def test_compare_with_an_unknown_peer_names_the_missing_script(tmp_path):
    command = [
        sys.executable,
        str(REPO / BENCHMARK),
        "--compare",
        "nosuch",
        "experiment=smoke",
        f"hydra.run.dir={tmp_path}",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "peers/nosuch.sh" in done.stdout + done.stderr and "joeynmt" in done.stdout + done.stderr
