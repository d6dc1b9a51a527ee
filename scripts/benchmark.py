"""Training and decoding speed, MFU and memory on the configured data and model: one process.

    python scripts/benchmark.py                         # the default model on Multi30k, this device
    python scripts/benchmark.py trainer.device=cuda     # the same on a GPU
    python scripts/benchmark.py experiment=smoke        # the whole benchmark in well under a minute
    python scripts/benchmark.py benchmark.run=RUN       # decoding speed of a trained run

Measures (a) the matmul roof: FLOP/s of large bf16 and fp32 products; (b) training steps/s and
target and source tokens/s on the real token-count batches, after warm-up, median of several
windows; (c) model FLOPs per target token (minimt.flops: attention included, real tokens only)
and MFU = achieved model FLOP/s / the roof of the training precision; (d) the padding fraction
of an epoch's batches; (e) decoding sentences/s on the first test set: greedy with and without
the key/value cache, beam 5 (with no benchmark.run, the barely trained model decodes to the
length cap: a worst case); (f) peak RSS and, on GPU, peak allocated memory. Prints a table and
writes benchmark.json into the Hydra run directory.
"""

import itertools
import logging
import statistics
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
from minimt.data import id_lengths
from minimt.flops import Shape, training_flops
from minimt.model import Transformer
from minimt.rundata import RunData, prepare_data
from minimt.rundir import build_model, pick_device, resolve_precision
from minimt.tokenizer import PAD_ID
from minimt.training import SummedLoss, make_optimizer, train_step
from minimt.translator import Translator

log = logging.getLogger("minimt")
register_resolvers()
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def batch_order(data: RunData) -> Iterator[list[int]]:
    """The training batches (index lists) epoch after epoch, as training takes them."""
    for epoch in itertools.count():
        yield from data.train_batches.batches(epoch)


def measure_training(
    cfg: DictConfig, data: RunData, model: Transformer, device: torch.device, autocast
) -> dict:
    """Median steps/s, tokens/s and model FLOP/s over timed windows of real training steps."""
    bench, trainer = cfg.benchmark, cfg.trainer
    optimizer, scheduler = make_optimizer(model, trainer)
    loss_fn = SummedLoss(model, trainer.label_smoothing, autocast)
    shape, order = Shape.of(model), batch_order(data)

    def window(steps: int) -> dict[str, float]:
        counts = {"tgt_tokens": 0, "src_tokens": 0, "flops": 0}

        def run() -> None:
            for _ in range(steps):
                batch = data.train_batches.collate(next(order))
                src_lens = (batch.src != PAD_ID).sum(1).tolist()
                tgt_lens = (batch.tgt_out != PAD_ID).sum(1).tolist()
                counts["src_tokens"] += sum(src_lens)
                counts["tgt_tokens"] += sum(tgt_lens)
                counts["flops"] += training_flops(shape, src_lens, tgt_lens)
                batch = batch.to(device)
                scale = 1 / sum(tgt_lens)
                train_step(loss_fn, [batch], scale, optimizer, scheduler, trainer.clip_grad_norm)

        seconds = timed(run, device)
        return {"seconds": seconds, "steps": steps, **counts}

    window(bench.warmup_steps)
    windows = [window(bench.window_steps) for _ in range(bench.windows)]

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


def measure_padding(data: RunData) -> dict[str, float]:
    """Padding fraction of epoch 0's source and target tensors."""
    src_lens, tgt_lens = id_lengths(data.train_batches.pairs)
    batches = data.train_batches.batches(0)
    return {
        "src": padding_fraction(src_lens + 1, batches),  # + <eos>
        "tgt": padding_fraction(tgt_lens + 1, batches),  # + <bos> / <eos>
    }


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
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    torch.manual_seed(cfg.trainer.seed)
    device = pick_device(cfg.trainer.device)
    precision = resolve_precision(cfg.trainer.precision, device)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")
    roof = {
        name: matmul_flops_per_sec(device, dtype, bench.matmul_size, bench.repeats)
        for name, dtype in DTYPES.items()
    }
    data = prepare_data(cfg)
    vocab = (data.tokenizers.src_vocab_size, data.tokenizers.tgt_vocab_size)
    model = build_model(cfg, *vocab).to(device)
    training = measure_training(cfg, data, model, device, autocast)
    training["mfu"] = training["model_flops_per_s"] / roof[precision]
    synchronize(device)
    report = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "precision": precision,
        "num_parameters": model.num_parameters(),
        "matmul_peak_flops_per_s": roof,
        "training": training,
        "padding_fraction": measure_padding(data),
        "decoding": measure_decoding(cfg, data, model, precision),
        "peak_rss_mb": peak_rss_mb(),
        "config": OmegaConf.to_container(cfg, resolve=True),
    }
    if device.type == "cuda":
        report["peak_allocated_mb"] = torch.cuda.max_memory_allocated(device) / 2**20
    return report


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
        ("padding src / tgt", "{src:.1%} / {tgt:.1%}".format(**report["padding_fraction"])),
        *(
            (f"decoding {name} ({d['sentences']} sent.)", f"{rate:,.1f} sentences/s")
            for name, rate in d["sentences_per_s"].items()
        ),
        ("peak RSS", f"{report['peak_rss_mb']:,.0f} MB"),
    ]
    if "peak_allocated_mb" in report:
        rows.append(("peak GPU memory allocated", f"{report['peak_allocated_mb']:,.0f} MB"))
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


if __name__ == "__main__":
    main()
