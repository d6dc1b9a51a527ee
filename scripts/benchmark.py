"""Training and decoding speed, MFU and memory on the configured data and model: one process.

    python scripts/benchmark.py                         # the default model on Multi30k, this device
    python scripts/benchmark.py trainer.device=cuda     # the same on a GPU
    python scripts/benchmark.py experiment=smoke        # the whole benchmark in well under a minute
    python scripts/benchmark.py benchmark.run=RUN       # decoding speed of a trained run
    python scripts/benchmark.py --compare joeynmt       # + JoeyNMT trained side by side (minutes)

Measures (a) the matmul roof: FLOP/s of large bf16 and fp32 products; (b) training steps/s and
target and source tokens/s on the real token-count batches, after warm-up, median of several
windows; (c) model FLOPs per target token (minimt.flops: attention included, real tokens only)
and MFU = achieved model FLOP/s / the roof of the training precision; (d) the padding fraction
of an epoch's batches; (e) decoding sentences/s on the first test set: greedy with and without
the key/value cache, beam 5 (with no benchmark.run, the barely trained model decodes to the
length cap: a worst case); (f) peak RSS and, on GPU, peak allocated memory; (g) the effect of
each fast-path setting: training tokens/s of `benchmark.variants` (one setting changed each)
taking turns window by window with the config; (h) with `--compare NAME`, the peer toolkit
trained by scripts/peers/NAME.sh for `benchmark.compare_minutes`. Prints a table and writes
benchmark.json into the Hydra run directory.
"""

import copy
import itertools
import json
import logging
import os
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from minimt.benchmarking import (
    decoding_rates,
    matmul_flops_per_sec,
    padding_fraction,
    peak_rss_mb,
    synchronize,
    timed,
)
from minimt.checkpoint import save_json
from minimt.config import ConfigError, register_resolvers, validate_config
from minimt.corpus import DataError
from minimt.data import id_lengths, prefetched
from minimt.flops import Shape, training_flops
from minimt.memory import reexec_with_mimalloc
from minimt.model import Transformer
from minimt.rundata import RunData, prepare_data
from minimt.rundir import build_model, pick_device, precision_autocast, resolve_precision
from minimt.tokenizer import PAD_ID
from minimt.training import make_optimizer, train_step, training_loss
from minimt.translator import Translator

log = logging.getLogger("minimt")
register_resolvers()
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


class TrainingRun:
    """A model trained on the real batches under one config, timed a window of steps at a time:
    the trainer's own pieces (optimizer, loss, prefetched collation)."""

    def __init__(self, cfg: DictConfig, data: RunData, device: torch.device):
        torch.manual_seed(cfg.trainer.seed)
        vocab = (data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size)
        self.cfg, self.device = cfg, device
        self.precision = resolve_precision(cfg.trainer.precision, device)
        autocast = precision_autocast(self.precision, device)
        self.model = build_model(cfg, *vocab).to(device)
        self.optimizer, self.scheduler = make_optimizer(self.model, cfg.trainer)
        self.loss_fn = training_loss(self.model, cfg.trainer, autocast)
        self.shape = Shape.of(self.model)
        batches = (data.train_batches.collate(i) for i in batch_order(data))
        self.batches = prefetched(batches, cfg.trainer.prefetch)

    def window(self, steps: int) -> dict[str, float]:
        """Seconds, steps, target/source tokens and model FLOPs of the next `steps` steps."""
        counts = {"tgt_tokens": 0, "src_tokens": 0, "flops": 0}
        trainer = self.cfg.trainer

        def run() -> None:
            for batch in itertools.islice(self.batches, steps):
                src_lens = (batch.src != PAD_ID).sum(1).tolist()
                tgt_lens = (batch.tgt_out != PAD_ID).sum(1).tolist()
                counts["src_tokens"] += sum(src_lens)
                counts["tgt_tokens"] += sum(tgt_lens)
                counts["flops"] += training_flops(self.shape, src_lens, tgt_lens)
                args = ([batch.to(self.device)], 1 / sum(tgt_lens), self.optimizer, self.scheduler)
                train_step(self.loss_fn, *args, trainer.clip_grad_norm)

        return {"seconds": timed(run, self.device), "steps": steps, **counts}


def batch_order(data: RunData) -> Iterator[list[int]]:
    """The training batches (index lists) epoch after epoch, as training takes them."""
    for epoch in itertools.count():
        yield from data.train_batches.batches(epoch)


def measure_training(runs: dict[str, TrainingRun], bench: DictConfig) -> dict[str, dict]:
    """Per run: median steps/s, tokens/s and model FLOP/s over timed windows after warm-up.

    Several runs take turns window by window on the same batches, so they share the machine's
    noise; their ratios are what to quote."""
    for run in runs.values():
        run.window(bench.warmup_steps)
    windows = {name: [] for name in runs}
    for _ in range(bench.windows):
        for name, run in runs.items():
            windows[name].append(run.window(bench.window_steps))
    return {name: _rates(found) for name, found in windows.items()}


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
        validate_config(variant)
    runs = {name: TrainingRun(variant, data, device) for name, variant in configs.items()}
    rates = measure_training(runs, cfg.benchmark)
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


def measure_decoding(cfg: DictConfig, data: RunData, model: Transformer, precision: str) -> dict:
    bench = cfg.benchmark
    if bench.run:
        translator = Translator.from_run(bench.run, "best", device=cfg.trainer.device)
    else:
        translator = Translator.from_config(model, data.tokenizers, cfg, precision)
    name, (sources, references) = next(iter(data.splits.tests.items()))
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


def benchmark(cfg: DictConfig) -> dict:
    bench = cfg.benchmark
    if bench.compare:
        peer_script(bench.compare)  # before any work
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    device = pick_device(cfg.trainer.device)
    roof = {
        name: matmul_flops_per_sec(device, dtype, bench.matmul_size, bench.repeats)
        for name, dtype in DTYPES.items()
    }
    data = prepare_data(cfg)
    run = TrainingRun(cfg, data, device)
    training = measure_training({"config": run}, bench)["config"]
    training["mfu"] = training["model_flops_per_s"] / roof[run.precision]
    synchronize(device)
    report = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "precision": run.precision,
        "num_parameters": run.model.num_parameters(),
        "matmul_peak_flops_per_s": roof,
        "training": training,
        "padding_fraction": measure_padding(data),
        "decoding": measure_decoding(cfg, data, run.model, run.precision),
        "peak_rss_mb": peak_rss_mb(),  # before the variants' extra models
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    if device.type == "cuda":
        report["peak_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    if bench.variants:
        report["variants"] = measure_variants(cfg, data, device)
    if bench.compare:
        report["peers"] = {bench.compare: run_peer(bench.compare, bench.compare_minutes)}
    return report


def peer_script(name: str) -> Path:
    script = Path(__file__).parent / "peers" / f"{name}.sh"
    if not script.is_file():
        known = ", ".join(sorted(p.stem for p in script.parent.glob("*.sh")))
        raise ConfigError(f"--compare {name}: no peer script {script} (peers: {known})")
    return script


def run_peer(name: str, minutes: float) -> dict:
    """Train the peer toolkit with scripts/peers/<name>.sh for `minutes`; its results.json."""
    script = peer_script(name)
    out = Path(HydraConfig.get().runtime.output_dir) / "peers" / name
    environment = os.environ | {f"{name.upper()}_OUT": str(out)}
    command = ["bash", str(script), "--minutes", str(minutes), "--validation-freq", "50"]
    log.info("training the peer %s for %s minutes: %s", name, minutes, " ".join(command))
    subprocess.run(command, check=True, env=environment)
    return json.loads((out / "results.json").read_text())


def print_table(report: dict) -> None:
    t, d = report["training"], report["decoding"]
    roof = report["matmul_peak_flops_per_s"]
    rows = [
        (
            "device / threads / precision",
            f"{report['device']} / {report['threads']} / "
            f"{report['precision']} (torch {report['torch']})",
        ),
        (
            "matmul roof bf16 / fp32",
            f"{roof['bf16'] / 1e9:,.0f} / {roof['fp32'] / 1e9:,.0f} GFLOP/s",
        ),
        ("training steps/s", f"{t['steps_per_s']:.2f}"),
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
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


@hydra.main(config_path="../configs", config_name="benchmark", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        validate_config(cfg)
        report = benchmark(cfg)
    except (ConfigError, DataError) as error:
        log.error("%s", error)
        sys.exit(1)
    save_json(out / "benchmark.json", report)
    print_table(report)
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
    reexec_with_mimalloc()
    sys.argv = take_compare_flag(sys.argv)
    main()
