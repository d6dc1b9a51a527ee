"""Measurements for the benchmark scripts: matmul roof, padding, decoding speed, memory."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from minimt.metrics import corpus_scores
from minimt.translator import Translator

DECODING_VARIANTS = {  # name: (use_cache, beam)
    "greedy_cached": (True, 1),
    "greedy_uncached": (False, 1),
    "beam5_cached": (True, 5),
}


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
