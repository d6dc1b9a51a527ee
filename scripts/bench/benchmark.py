"""Training and decoding speed, MFU and memory on the configured data and model: one process.

    python scripts/bench/benchmark.py                      # the default model on Multi30k
    python scripts/bench/benchmark.py trainer.device=cuda  # the same on a GPU
    python scripts/bench/benchmark.py experiment=smoke     # all of it in well under a minute
    python scripts/bench/benchmark.py benchmark.run=RUN    # decoding speed of a trained run
    python scripts/bench/benchmark.py --compare joeynmt    # + JoeyNMT side by side (minutes)

Measures (a) the matmul roof: FLOP/s of large fp32 products, and of bf16 ones where the device has
bf16 matrix units or training runs in bf16 (emulated bf16 products take minutes); (b) training
steps/s and target and source tokens/s on the real token-count batches, after warm-up (on CUDA
at least CUDA_WARMUP_STEPS), median of several windows, each timing the steps as train() takes
them and nothing that waits on the device (tokens and FLOPs come from the lengths on the host);
on CUDA also updates/s with the study's validation schedule (greedy, configs/experiment/study.yaml);
(c) model FLOPs per target token (`forward_flops`: attention included, real
tokens only) and MFU = achieved model FLOP/s / the roof of the training precision; (d) the padding
fraction of an epoch's batches; (e) decoding sentences/s on the first test set: greedy with and
without the key/value cache, beam 5 (with no benchmark.run, the barely trained model decodes to the
length cap: a worst case); (f) peak RSS and, on GPU, peak allocated memory; (g) the effect of each
fast-path setting: training tokens/s of `benchmark.variants` (one setting changed each) taking
turns window by window with the config; (h) with `--compare NAME`, the peer toolkit trained by
scripts/peers/NAME.sh for `benchmark.compare_minutes`; (i) with `benchmark.profile_steps`, the
ops taking the most time in training steps and in beam-5 decoding (torch.profiler). Prints a
table and writes benchmark.json into the Hydra run directory (settings: configs/benchmark.yaml).

decoding.py and preprocessing.py, beside it, import its measurements (`from benchmark import ...`:
Python puts a script's own folder first on sys.path).
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import hydra
import numpy as np
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf
from torch.profiler import ProfilerActivity, profile

from minimt.allocator import reexec_with_mimalloc
from minimt.checkpoint import save_json
from minimt.cli import one_line_errors
from minimt.config import ConfigError, register_resolvers, validate_config
from minimt.data.batching import prefetched
from minimt.data.splits import RunData, prepare_data
from minimt.data.tokenized import id_lengths
from minimt.metrics import corpus_scores
from minimt.model.transformer import Transformer
from minimt.runtime import (
    bf16_supported,
    job_num_threads,
    pick_device,
    resolve_precision,
    seed_everything,
    set_num_threads,
)
from minimt.train.evaluation import score, validation_nll
from minimt.train.step import build_training, checks_on_host, train_step
from minimt.translator import Translator

log = logging.getLogger(__name__)
PEERS = Path(__file__).resolve().parents[1] / "peers"
STUDY_EXPERIMENT = Path(__file__).resolve().parents[2] / "configs" / "experiment" / "study.yaml"
CUDA_WARMUP_STEPS = 200  # > an epoch of Multi30k at 4,096 tokens (~120 updates): see warmup_steps
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
PROFILE_ROWS_SHOWN = 5  # of each profile in the printed table; benchmark.json has them all
DECODING_VARIANTS = {  # name: (use_cache, beam)
    "greedy_cached": (True, 1),
    "greedy_uncached": (False, 1),
    "beam5_cached": (True, 5),
}


# Model FLOPs, counted from the Transformer's shape (multiply-add = 2 FLOPs).


@dataclass(frozen=True)
class Shape:
    d_model: int
    d_ff: int
    n_encoder_layers: int
    n_decoder_layers: int
    tgt_vocab_size: int

    @classmethod
    def of(cls, model: Transformer) -> Shape:
        layer = model.encoder_layers[0]
        return cls(
            d_model=layer.ffn.w1.in_features,
            d_ff=layer.ffn.w1.out_features,
            n_encoder_layers=len(model.encoder_layers),
            n_decoder_layers=len(model.decoder_layers),
            tgt_vocab_size=model.embedding.tgt_token_weight.size(0),
        )


def forward_flops(shape: Shape, src_len: int, tgt_len: int) -> int:
    """FLOPs of one forward pass over a pair of src_len and tgt_len tokens.

    With S source and T target tokens (<eos> / <bos> included), width d, feed-forward width f,
    target vocabulary V:

        encoder layer   S (8 d^2 + 4 d f) + 4 S^2 d         projections, FFN; QK^T and AV
        decoder layer   T (8 d^2 + 4 d f) + 4 T^2 d         the same for self-attention
                        + 4 T d^2 + 4 S d^2 + 4 T S d       cross-attention: q, o; k, v; QK^T, AV
        output          2 T d V                             the tied projection

    Attention is counted in full (T^2, not T^2 / 2) as the kernels compute it. Only real tokens
    count: padding is waste, not model work (the benchmark reports it separately).
    """
    d, f, s, t = shape.d_model, shape.d_ff, src_len, tgt_len
    encoder_layer = s * (8 * d * d + 4 * d * f) + 4 * s * s * d
    decoder_layer = (
        t * (8 * d * d + 4 * d * f) + 4 * t * t * d + 4 * t * d * d + 4 * s * d * d + 4 * t * s * d
    )
    output = 2 * t * d * shape.tgt_vocab_size
    return shape.n_encoder_layers * encoder_layer + shape.n_decoder_layers * decoder_layer + output


def training_flops(shape: Shape, src_lens: Sequence[int], tgt_lens: Sequence[int]) -> int:
    """FLOPs of a training step over pairs of these lengths: backward = 2 x forward."""
    return 3 * sum(forward_flops(shape, s, t) for s, t in zip(src_lens, tgt_lens, strict=True))


# Measurements: the matmul roof, padding, decoding speed, memory, where the time goes.


def peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports ru_maxrss in KiB).

    It counts the pages of memory-mapped Arrow files that were read, which the kernel can drop.
    """
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Callable[[], object], device: torch.device) -> float:
    """Seconds `fn` takes, the device's queued work included."""
    synchronize(device)
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def matmul_flops_per_sec(device: torch.device, dtype: torch.dtype, n: int, repeats: int) -> float:
    """Median FLOP/s of an n x n x n matrix product: the roof that MFU is measured against."""
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up: allocations, kernel selection
    seconds = [timed(lambda: a @ b, device) for _ in range(repeats)]
    return 2 * n**3 / statistics.median(seconds)


def padding_fraction(lengths: np.ndarray, batches: Sequence[Sequence[int]]) -> float:
    """Share of padding in the (B, longest) tensors of `batches` (index lists into `lengths`)."""
    real = padded = 0
    for indices in batches:
        batch_lengths = lengths[list(indices)]
        real += int(batch_lengths.sum())
        padded += len(indices) * int(batch_lengths.max())
    return 1 - real / padded


def decoding_rates(
    translator: Translator, sources: list[str], references: list[str], repeats: int
) -> tuple[dict[str, float], dict[str, list[float]], dict[str, float]]:
    """Sentences/s (median over `repeats`, the variants interleaved), seconds and BLEU per
    variant of DECODING_VARIANTS."""
    seconds: dict[str, list[float]] = {name: [] for name in DECODING_VARIANTS}
    bleu = {}
    for _ in range(repeats):
        for name, (use_cache, beam) in DECODING_VARIANTS.items():
            translator.use_cache = use_cache
            start = time.perf_counter()
            hyps = translator.translate(sources, beam=beam)
            seconds[name].append(time.perf_counter() - start)
            bleu[name] = corpus_scores(hyps, references).bleu
    rates = {name: len(sources) / statistics.median(s) for name, s in seconds.items()}
    return rates, seconds, bleu


def top_ops(fn: Callable[[], object], device: torch.device, rows: int) -> list[dict]:
    """The `rows` ops with the most self time while `fn` runs (torch.profiler): name, share of all
    ops' self time, milliseconds and calls. Self time is on the GPU for a CUDA device (kernels), on
    the host otherwise; ops run by intra-op threads count once, under the op that launched them."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as profiler:
        fn()
        synchronize(device)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [event for event in profiler.key_averages() if getattr(event, key) > 0]
    total = sum(getattr(event, key) for event in events)
    ranked = sorted(events, key=lambda event: getattr(event, key), reverse=True)[:rows]
    return [
        {
            "op": event.key,
            "self_share": getattr(event, key) / total,
            "self_ms": getattr(event, key) / 1e3,
            "calls": event.count,
        }
        for event in ranked
    ]


# The benchmark: training under the config (and its variants), decoding, peers.


class TrainingRun:
    """A model trained on the real batches under one config, timed a window of steps at a time:
    the trainer's own pieces (optimizer, loss, prefetched collation) and its step."""

    def __init__(self, cfg: DictConfig, data: RunData, device: torch.device):
        seed_everything(cfg.trainer.seed)
        vocab = (data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size)
        self.cfg, self.device = cfg, device
        self.training = build_training(cfg, *vocab, device)
        self.shape = Shape.of(self.training.model)
        self.src_lens, self.tgt_lens = id_lengths(data.train_batches.pairs)  # (pairs,) on host
        batches = ((i, data.train_batches.collate(i)) for i in batch_order(data))
        self.batches = prefetched(batches, cfg.trainer.prefetch)
        self.host_check = checks_on_host(device)

    def window(self, steps: int) -> dict[str, float]:
        """Seconds, steps, target/source tokens and model FLOPs of the next `steps` steps."""
        taken: list[list[int]] = []
        seconds = timed(lambda: taken.extend(self.train(steps)), self.device)
        return {"seconds": seconds, "steps": steps, **self.counts(taken)}

    def train(self, steps: int) -> list[list[int]]:
        """The next `steps` updates as train() takes them, nothing else -> their batches' pairs.
        On a GPU nothing here waits for the device (train_step keeps its checks there)."""
        t, clip = self.training, self.cfg.trainer.clip_grad_norm
        taken = []
        for indices, batch in itertools.islice(self.batches, steps):
            batches, scale = [batch.to(self.device)], 1 / batch.num_tgt_tokens
            train_step(
                t.loss_fn,
                batches,
                scale=scale,
                optimizer=t.optimizer,
                scheduler=t.scheduler,
                clip_grad_norm=clip,
                host_check=self.host_check,
            )
            taken.append(indices)
        return taken

    def counts(self, batches: list[list[int]]) -> dict[str, int]:
        """Source and target tokens and model FLOPs of these batches (index lists of pairs),
        from the token counts on the host: + <eos> on the source, + <bos> / <eos> on the target."""
        src_lens = [int(n) + 1 for indices in batches for n in self.src_lens[indices]]
        tgt_lens = [int(n) + 1 for indices in batches for n in self.tgt_lens[indices]]
        return {
            "tgt_tokens": sum(tgt_lens),
            "src_tokens": sum(src_lens),
            "flops": training_flops(self.shape, src_lens, tgt_lens),
        }


def batch_order(data: RunData) -> Iterator[list[int]]:
    """The training batches (index lists) epoch after epoch, as training takes them."""
    for epoch in itertools.count():
        yield from data.train_batches.batches(epoch)


def warmup_steps(bench: DictConfig, device: torch.device) -> int:
    """Training steps before the timed windows: `benchmark.warmup_steps`, on CUDA at least
    CUDA_WARMUP_STEPS. There the first batch of each shape picks its kernels (cuBLAS heuristics,
    modules loaded on first use) and grows the caching allocator; training pays that once per
    shape, in its first epoch, so windows timed within the first epoch under-report it."""
    if device.type == "cuda":
        return max(bench.warmup_steps, CUDA_WARMUP_STEPS)
    return bench.warmup_steps


def measure_training(
    runs: dict[str, TrainingRun], bench: DictConfig, device: torch.device
) -> dict[str, dict]:
    """Per run: median steps/s, tokens/s and model FLOP/s over timed windows after warm-up.

    Several runs take turns window by window on the same batches, so they share the machine's
    noise; their ratios are what to quote."""
    warmup = warmup_steps(bench, device)
    for run in runs.values():
        run.train(warmup)
    windows = {name: [] for name in runs}
    for _ in range(bench.windows):
        for name, run in runs.items():
            windows[name].append(run.window(bench.window_steps))
    return {name: _rates(found) | {"warmup_steps": warmup} for name, found in windows.items()}


def _rates(windows: list[dict[str, float]]) -> dict:
    def median_rate(key: str) -> float:
        return statistics.median(w[key] / w["seconds"] for w in windows)

    return {
        "steps_per_s": median_rate("steps"),
        "tgt_tokens_per_s": median_rate("tgt_tokens"),
        "src_tokens_per_s": median_rate("src_tokens"),
        "model_flops_per_s": median_rate("flops"),
        "model_flops_per_tgt_token": sum(w["flops"] for w in windows)
        / sum(w["tgt_tokens"] for w in windows),
        "windows": windows,
    }


def with_changes(cfg: DictConfig, change: DictConfig) -> DictConfig:
    """A copy of `cfg` with `change`'s dotted keys set to its values."""
    changed = copy.deepcopy(cfg)
    for key, value in change.items():
        OmegaConf.update(changed, str(key), value)
    return changed


def measure_variants(cfg: DictConfig, data: RunData, device: torch.device) -> dict:
    """Target tokens/s of the config and of each `benchmark.variants` change to it, taking turns;
    each variant's speed-up is the config's tokens/s over the variant's."""
    configs = {"config": cfg} | {
        name: with_changes(cfg, change) for name, change in cfg.benchmark.variants.items()
    }
    for variant in configs.values():
        validate_config(variant, own_sections=("benchmark",))
    runs = {name: TrainingRun(variant, data, device) for name, variant in configs.items()}
    rates = measure_training(runs, cfg.benchmark, device)
    base, changes = (
        rates["config"]["tgt_tokens_per_s"],
        OmegaConf.to_container(cfg.benchmark.variants),
    )
    return {
        name: {
            "change": changes.get(name, {}),
            "tgt_tokens_per_s": found["tgt_tokens_per_s"],
            "config_speedup": base / found["tgt_tokens_per_s"],
        }
        for name, found in rates.items()
    }


def study_validation() -> tuple[int, int]:
    """The study's validation schedule (configs/experiment/study.yaml): every how many updates,
    on how many val pairs."""
    study = OmegaConf.load(STUDY_EXPERIMENT)
    return study.trainer.val_every, study.data.max_val_pairs


def measure_validation(
    cfg: DictConfig, run: TrainingRun, translator: Translator, training: dict
) -> dict[str, float]:
    """Seconds of one validation as the study runs it (the loss, then greedy BLEU, on its val
    pairs) and the updates/s of training with one every val_every updates. The loss is the
    benchmarked model's (its cost does not depend on the weights), decoding the translator's
    (benchmark.run's model when given: its output lengths are a trained model's)."""
    every, pairs = study_validation()
    data = prepare_data(with_changes(cfg, OmegaConf.create({"data.max_val_pairs": pairs})))
    model, autocast = run.training.model, run.training.autocast

    def validate() -> None:
        validation_nll(model, data.val_batches, autocast)
        score(translator, data.splits.val, beam=1, length_penalty=1.0)

    validate()  # its shapes' first use, as in warmup_steps
    seconds = timed(validate, run.device)
    return {
        "val_every": every,
        "val_pairs": len(data.splits.val[0]),
        "validation_seconds": seconds,
        "updates_per_s": every / (every / training["steps_per_s"] + seconds),
    }


def measure_padding(data: RunData) -> dict[str, float]:
    """Padding fraction of epoch 0's source and target tensors: the length-sorted batches
    training takes, and batches filled in random order (what no length buckets would give)."""
    src_lens, tgt_lens = id_lengths(data.train_batches.pairs)
    found = {}
    for name, by_length in (("", True), ("unsorted_", False)):
        batches = data.train_batches.batches(0, by_length)
        found[f"{name}src"] = padding_fraction(src_lens + 1, batches)  # + <eos>
        found[f"{name}tgt"] = padding_fraction(tgt_lens + 1, batches)  # + <bos> / <eos>
    return found


def decoding_translator(
    cfg: DictConfig, data: RunData, model: Transformer, precision: str
) -> Translator:
    """The trained run's best checkpoint (`benchmark.run`), else the model just benchmarked."""
    if cfg.benchmark.run:
        return Translator.from_run(cfg.benchmark.run, "best", device=cfg.trainer.device)
    return Translator.from_config(model, data.tokenizers, cfg, precision)


def first_test_set(data: RunData) -> tuple[str, tuple[list[str], list[str]]]:
    """The test set decoding is timed on: (name, (sources, references))."""
    return next(iter(data.splits.tests.items()))


def measure_decoding(cfg: DictConfig, data: RunData, translator: Translator) -> dict:
    bench = cfg.benchmark
    name, (sources, references) = first_test_set(data)
    n = bench.decode_sentences
    rates, seconds, bleu = decoding_rates(translator, sources[:n], references[:n], bench.repeats)
    return {
        "test_set": name,
        "sentences": len(sources[:n]),
        "model": str(bench.run) if bench.run else "the benchmarked model (barely trained)",
        "sentences_per_s": rates,
        "seconds": seconds,
        "bleu": bleu,
    }


def measure_profile(
    run: TrainingRun, translator: Translator, data: RunData, bench: DictConfig
) -> dict[str, list[dict]]:
    """Top ops by self time of `profile_steps` training steps and of beam-5 decoding of the
    first test set's first `profile_sentences` sentences."""
    sources = first_test_set(data)[1][0][: bench.profile_sentences]
    rows = bench.profile_rows
    return {
        "training": top_ops(lambda: run.window(bench.profile_steps), run.device, rows),
        "beam5_decoding": top_ops(lambda: translator.translate(sources, beam=5), run.device, rows),
    }


def benchmark(cfg: DictConfig, out_dir: Path, peers_dir: Path) -> dict:
    """Everything the module docstring lists, as one report (benchmark.json). A peer toolkit
    (`benchmark.compare`) is trained by peers_dir/<name>.sh into out_dir/peers/<name>."""
    bench = cfg.benchmark
    if bench.compare:
        peer_script(peers_dir, bench.compare)  # before any work
    set_num_threads(job_num_threads(cfg.trainer.num_threads))
    device = pick_device(cfg.trainer.device)
    precision = resolve_precision(cfg.trainer.precision, device)
    roof = {
        name: matmul_flops_per_sec(device, dtype, bench.matmul_size, bench.repeats)
        for name, dtype in DTYPES.items()
        if name in ("fp32", precision) or bf16_supported(device)
    }
    data = prepare_data(cfg)
    run = TrainingRun(cfg, data, device)
    training = measure_training({"config": run}, bench, device)["config"]
    training["mfu"] = training["model_flops_per_s"] / roof[run.training.precision]
    synchronize(device)
    translator = decoding_translator(cfg, data, run.training.model, run.training.precision)
    if device.type == "cuda":
        training["with_validation"] = measure_validation(cfg, run, translator, training)
    report = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "precision": run.training.precision,
        "num_parameters": run.training.model.num_parameters(),
        "matmul_peak_flops_per_s": roof,
        "training": training,
        "padding_fraction": measure_padding(data),
        "decoding": measure_decoding(cfg, data, translator),
        "peak_rss_mb": peak_rss_mb(),  # before the variants' extra models
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    if device.type == "cuda":
        report["peak_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    if bench.profile_steps:
        report["profile"] = measure_profile(run, translator, data, bench)
    if bench.variants:
        report["variants"] = measure_variants(cfg, data, device)
    if bench.compare:
        peer = run_peer(peer_script(peers_dir, bench.compare), out_dir, bench.compare_minutes)
        report["peers"] = {bench.compare: peer}
    return report


def peer_script(peers_dir: Path, name: str) -> Path:
    script = peers_dir / f"{name}.sh"
    if not script.is_file():
        known = ", ".join(sorted(p.stem for p in peers_dir.glob("*.sh")))
        raise ConfigError(f"--compare {name}: no peer script {script} (peers: {known})")
    return script


def run_peer(script: Path, out_dir: Path, minutes: float) -> dict:
    """Train a peer toolkit with its script (scripts/peers/<name>.sh) for `minutes`; its
    results.json, from out_dir/peers/<name>."""
    name = script.stem
    out = out_dir / "peers" / name
    environment = os.environ | {f"{name.upper()}_OUT": str(out)}
    command = ["bash", str(script), "--minutes", str(minutes), "--validation-freq", "50"]
    log.info("training the peer %s for %s minutes: %s", name, minutes, " ".join(command))
    subprocess.run(command, check=True, env=environment)
    return json.loads((out / "results.json").read_text())


def validation_rows(training: dict) -> list[tuple[str, str]]:
    """The updates/s with the study's validation (measured on CUDA only) as table rows."""
    if "with_validation" not in training:
        return []
    v = training["with_validation"]
    return [
        (
            f"updates/s validating every {v['val_every']} ({v['val_pairs']} val pairs)",
            f"{v['updates_per_s']:.2f} ({v['validation_seconds']:.1f} s per validation)",
        )
    ]


def format_table(report: dict) -> str:
    """The report as aligned `name  value` lines."""
    t, d = report["training"], report["decoding"]
    roof = report["matmul_peak_flops_per_s"]
    rows = [
        (
            "device / threads / precision",
            f"{report['device']} / {report['threads']} / "
            f"{report['precision']} (torch {report['torch']})",
        ),
        (
            "matmul roof " + " / ".join(roof),
            " / ".join(f"{flops / 1e9:,.0f}" for flops in roof.values()) + " GFLOP/s",
        ),
        ("training steps/s", f"{t['steps_per_s']:.2f}"),
        *validation_rows(t),
        (
            "target / source tokens/s",
            f"{t['tgt_tokens_per_s']:,.0f} / {t['src_tokens_per_s']:,.0f}",
        ),
        ("model FLOPs per target token", f"{t['model_flops_per_tgt_token'] / 1e6:.1f} M"),
        ("model FLOP/s, MFU", f"{t['model_flops_per_s'] / 1e9:,.1f} GFLOP/s, {t['mfu']:.1%}"),
        (
            "padding src / tgt (unsorted batches)",
            "{src:.1%} / {tgt:.1%} ({unsorted_src:.1%} / {unsorted_tgt:.1%})".format(
                **report["padding_fraction"]
            ),
        ),
        *(
            (f"decoding {name} ({d['sentences']} sent.)", f"{rate:,.1f} sentences/s")
            for name, rate in d["sentences_per_s"].items()
        ),
        ("peak RSS", f"{report['peak_rss_mb']:,.0f} MB"),
    ]
    if "peak_allocated_mb" in report:
        rows.append(("peak GPU memory allocated", f"{report['peak_allocated_mb']:,.0f} MB"))
    for name, variant in report.get("variants", {}).items():
        change = " ".join(f"{k}={v}" for k, v in variant["change"].items()) or "(as configured)"
        rows.append(
            (
                f"variant {name}: {change}",
                f"{variant['tgt_tokens_per_s']:,.0f} tgt tok/s "
                f"(config {variant['config_speedup']:.2f}x)",
            )
        )
    for name, peer in report.get("peers", {}).items():
        rows += [
            (
                f"{name}: target tokens/s",
                f"{peer['tgt_tokens_per_s']:,.0f} "
                f"(minimt {t['tgt_tokens_per_s'] / peer['tgt_tokens_per_s']:.1f}x)",
            ),
            (f"{name}: beam-5 sentences/s", f"{peer['beam5_sentences_per_s']:,.1f}"),
            (f"{name}: peak RSS", f"{peer['peak_rss_mb']:,.0f} MB"),
        ]
    for part, ops in report.get("profile", {}).items():
        rows += [
            (f"profile {part}: {op['op']}", f"{op['self_share']:.1%} of self time")
            for op in ops[:PROFILE_ROWS_SHOWN]
        ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name:<{width}}  {value}" for name, value in rows)


@hydra.main(config_path="../../configs", config_name="benchmark", version_base="1.3")
@one_line_errors
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    validate_config(cfg, own_sections=("benchmark",))
    report = benchmark(cfg, out, PEERS)
    save_json(out / "benchmark.json", report)
    print(format_table(report))
    print(f"wrote {out / 'benchmark.json'}")


def take_compare_flag(argv: list[str]) -> list[str]:
    """`--compare NAME` (README's spelling) as the Hydra override benchmark.compare=NAME."""
    if "--compare" not in argv:
        return argv
    at = argv.index("--compare")
    if at + 1 == len(argv):
        sys.exit("--compare needs a peer name: --compare joeynmt")
    return [*argv[:at], f"benchmark.compare={argv[at + 1]}", *argv[at + 2 :]]


if __name__ == "__main__":
    # A process picks its allocator when it starts: this one starts again with mimalloc (its
    # imports, a few seconds, paid twice in a benchmark of minutes).
    reexec_with_mimalloc()
    register_resolvers()
    sys.argv = take_compare_flag(sys.argv)
    main()
