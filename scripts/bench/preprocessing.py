"""Preprocessing time and peak memory on a big corpus: Multi30k train repeated to `pairs` pairs.

    python scripts/bench/preprocessing.py [pairs=1000000] [dir=data/benchmark_preprocessing]
        [overrides=[tokenizer.vocab_size=8000]]

Writes the synthetic corpus as plain text to DIR/corpus (val and test: Multi30k val and
test_2016_flickr, fetched from data.url as in training), empties the cache DIR/cache, then runs
`prepare_data` (data=parallel_text plus `overrides`) in a fresh process per stage:

    cold   BPE training, tokenization into Arrow, filtering, the first epoch's batches
    warm   the same with everything cached, then one epoch of collated batches
    lists  for comparison, what the list-based pipeline held: the training text and token ids
           as Python lists (on top of a warm run)

Each stage reports wall time, its process's peak RSS (ru_maxrss: it includes the pages of the
memory-mapped Arrow files that were read) and the anonymous RSS at its end (heap, Python objects;
Linux); prints a table and writes DIR/benchmark_preprocessing.json.
"""

import gzip
import platform
import shutil
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from benchmark import peak_rss_mb
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from minimt.checkpoint import save_json
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.data.corpus import read_parallel
from minimt.data.multi30k import fetch_multi30k_file
from minimt.data.splits import prepare_data

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
DEFAULTS = {"pairs": 1_000_000, "dir": "data/benchmark_preprocessing", "overrides": []}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
STAGES = ("cold", "warm", "lists")


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    folder = Path(args.dir).resolve()
    overrides = [*corpus_overrides(folder, args.pairs), *args.overrides]
    shutil.rmtree(folder / "cache", ignore_errors=True)
    results = {stage: in_fresh_process(stage, overrides) for stage in STAGES}
    report = {
        "pairs": args.pairs,
        "overrides": overrides,
        "python": platform.python_version(),
        "stages": results,
    }
    save_json(folder / "benchmark_preprocessing.json", report)
    print("stage  prepare+batches s  total s  peak RSS MB  after imports  anon at end  what")
    for stage, r in results.items():
        print(
            f"{stage:<6} {r['prepare_and_batch_seconds']:>17.1f} {r['seconds']:>8.1f} "
            f"{r['peak_rss_mb']:>12.0f} {r['import_rss_mb']:>14.0f} {r['anon_rss_mb']:>12.0f}  "
            f"{r['what']}"
        )


def corpus_overrides(folder: Path, pairs: int) -> list[str]:
    """Write the synthetic corpus under `folder`/corpus; the data=parallel_text overrides for it."""
    data = compose_config([]).data  # data.url and data.dir: where Multi30k is and is cached
    corpus = folder / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    files = {}
    for split, source in [("train", "train"), ("val", "val"), ("test", "test_2016_flickr")]:
        for side, lang in [("src", data.src_lang), ("tgt", data.tgt_lang)]:
            fetched = fetch_multi30k_file(data.url, data.dir, source, lang)
            files[f"{split}.{side}"] = corpus / f"{split}.{lang}"
            repeat_lines(fetched, files[f"{split}.{side}"], pairs if split == "train" else None)
    return [
        "data=parallel_text",
        f"data.dir={folder / 'cache'}",
        *(f"data.{name}={path}" for name, path in files.items()),
    ]


def repeat_lines(source: Path, dest: Path, count: int | None) -> None:
    """Write the first `count` lines of `source` repeated endlessly (None: its lines once)."""
    lines = gzip.decompress(source.read_bytes()).splitlines(keepends=True)
    count = len(lines) if count is None else count
    block = b"".join(lines)
    with dest.open("wb") as file:
        for _ in range(count // len(lines)):
            file.write(block)
        file.writelines(lines[: count % len(lines)])


def compose_config(overrides: list[str]) -> DictConfig:
    """The config `scripts/train.py` would see with these overrides."""
    with initialize_config_dir(config_dir=str(CONFIGS), version_base="1.3"):
        return compose("config", overrides=overrides)


def in_fresh_process(stage: str, overrides: list[str]) -> dict:
    """Run one stage in a new interpreter, so that its peak RSS is its own."""
    with ProcessPoolExecutor(max_workers=1, mp_context=get_context("spawn")) as pool:
        return pool.submit(run_stage, stage, overrides).result()


def run_stage(stage: str, overrides: list[str]) -> dict:
    """One stage in this (fresh) process: its wall time, peak RSS and a word on what it did."""
    setup_logging()
    import_rss = peak_rss_mb()
    cfg = compose_config(overrides)
    start = time.perf_counter()
    data = prepare_data(cfg)
    batches = data.train_batches.batches(epoch=0)
    result = {"prepare_and_batch_seconds": time.perf_counter() - start}
    if stage == "warm":
        for indices in batches:
            data.train_batches.collate(indices)
        what = f"cached; then one epoch, {len(batches)} batches collated"
    elif stage == "lists":
        text = read_parallel(cfg.data.train.src, cfg.data.train.tgt)
        ids = data.train_batches.pairs[:]
        what = f"+ {len(text[0]):,} text pairs and {len(ids['src_ids']):,} id pairs as lists"
    else:
        what = f"{len(data.train_batches.pairs):,} training pairs, {len(batches)} batches"
    result |= {"seconds": time.perf_counter() - start, "what": what}
    return result | {
        "import_rss_mb": import_rss,
        "peak_rss_mb": peak_rss_mb(),
        "anon_rss_mb": anon_rss_mb(),
    }


def anon_rss_mb() -> float:
    """The resident memory not backed by a file (heap, Python objects) now, in MB (Linux)."""
    with open("/proc/self/status") as status:
        (kib,) = [line.split()[1] for line in status if line.startswith("RssAnon:")]
    return int(kib) / 1024


if __name__ == "__main__":
    main(sys.argv[1:])
