"""What the benchmark computes: padding fractions, and the script end to end on the smoke config."""

import json
import operator

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from minimt.data.splits import prepare_data
from minimt.data.tokenizer import PAD_ID
from minimt.translator import Translator
from tests.helpers import compose_config, load_script, run_script, tiny_run_overrides
from tests.host_reads import HostReads

BENCHMARK = "bench/benchmark.py"  # under scripts/, as run_script takes it
benchmark = load_script(f"scripts/{BENCHMARK}")
padding_fraction = benchmark.padding_fraction


def test_padding_fraction_of_fabricated_batches():
    lengths = np.array([3, 5, 2, 4, 4])
    # batch 1: 3 rows padded to 5 -> 15 positions, 10 real; batch 2: 2 rows of 4, no padding
    assert padding_fraction(lengths, [[0, 1, 2], [3, 4]]) == 1 - (10 + 8) / (15 + 8)
    assert padding_fraction(lengths, [[3, 4]]) == 0.0


@pytest.mark.slow
def test_benchmark_runs_end_to_end_on_the_smoke_config(multi30k_dir, tmp_path):
    out = tmp_path / "bench"
    done = run_script(
        BENCHMARK,
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={tmp_path / 'data'}",
        "benchmark.warmup_steps=2",
        "benchmark.windows=2",
        "benchmark.window_steps=3",
        "benchmark.matmul_size=512",
        "benchmark.repeats=1",
        "benchmark.decode_sentences=20",
        "benchmark.profile_steps=2",
        "benchmark.profile_sentences=10",
        f"hydra.run.dir={out}",
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
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
    done = run_script(
        BENCHMARK,
        "--compare",
        "nosuch",
        "experiment=smoke",
        f"hydra.run.dir={tmp_path}",
        stdin="",
        timeout=120,
    )
    assert done.returncode == 1
    assert "peers/nosuch.sh" in done.stdout + done.stderr and "joeynmt" in done.stdout + done.stderr


def test_host_reads_counts_every_kind_of_read_and_nothing_else():
    x, mask = torch.arange(6.0), torch.arange(6) > 2
    reads = {
        "item": lambda: x[0].item(),
        "tolist": lambda: x.tolist(),
        "numpy": lambda: x.numpy(),
        "cpu": lambda: x.cpu(),
        "__bool__": lambda: 1 if mask.any() else 0,
        "__int__": lambda: int(x[1]),
        "__float__": lambda: float(x[1]),
        "__index__": lambda: [1, 2][operator.index(torch.tensor(1))],
        "nonzero": lambda: (mask.nonzero(), torch.nonzero(mask)),
        "argwhere": lambda: torch.argwhere(mask),
        "masked_select": lambda: x.masked_select(mask),
        "where": lambda: torch.where(mask),
        "__getitem__": lambda: (x[mask], x.view(2, 3)[:, mask[:3]]),
        "__setitem__": lambda: x.clone().__setitem__(mask, 0.0),
    }
    for name, read in reads.items():
        with HostReads() as counted:
            read()
        assert counted.calls == {name: 2 if name in ("nonzero", "__getitem__") else 1}, name
    with HostReads() as counted:
        x[torch.tensor([1, 2])], torch.where(mask, x, 0.0), x.to("cpu"), x.sum() * 2
    assert counted.count == 0, counted.calls


def test_the_timed_window_reads_the_host_only_inside_train_step(
    multi30k_dir, tmp_path, monkeypatch
):
    """On a GPU a read in the timed window waits for the queued steps: the window holds the
    steps as train() takes them, so every read in it is one train_step makes itself (batches
    are collated from host memory on the prefetch thread, as in training)."""
    cfg = compose_config(*tiny_run_overrides(multi30k_dir, tmp_path / "data"))
    data = prepare_data(cfg)
    run = benchmark.TrainingRun(cfg, data, torch.device("cpu"))
    in_train_step = []

    def train_step(*args, **kwargs):
        with HostReads() as reads:
            result = step(*args, **kwargs)
        in_train_step.append(reads.count)
        return result

    step = benchmark.train_step
    monkeypatch.setattr(benchmark, "train_step", train_step)
    with HostReads() as window:
        taken = run.train(3)
    assert len(taken) == len(in_train_step) == 3
    assert window.count == sum(in_train_step) > 0, window.calls
    collated = [data.train_batches.collate(indices) for indices in taken]
    src_lens = [n for b in collated for n in (b.src != PAD_ID).sum(1).tolist()]
    tgt_lens = [n for b in collated for n in (b.tgt_out != PAD_ID).sum(1).tolist()]
    assert run.counts(taken) == {
        "tgt_tokens": sum(b.num_tgt_tokens for b in collated),
        "src_tokens": sum(src_lens),
        "flops": benchmark.training_flops(run.shape, src_lens, tgt_lens),
    }
    t = run.training
    translator = Translator.from_config(t.model, data.tokenizers, cfg, t.precision)
    validation = benchmark.measure_validation(cfg, run, translator, {"steps_per_s": 2.0})
    schedule = (validation["val_every"], validation["val_pairs"])
    assert schedule == benchmark.study_validation() == (200, 500)
    assert 0 < validation["updates_per_s"] < 2.0


def test_cuda_warms_up_past_every_shape_of_an_epoch():
    bench = OmegaConf.create({"warmup_steps": 10})
    assert benchmark.warmup_steps(bench, torch.device("cpu")) == 10
    assert benchmark.warmup_steps(bench, torch.device("cuda")) == benchmark.CUDA_WARMUP_STEPS
