"""A trained run decoded by minimt (fp32, bf16) and by its CTranslate2 export (float32, int8),
side by side in one process on one kind of CPU.

    python scripts/bench/export.py run=DIR [beam=5] [repeats=3] [threads=1]
    python scripts/bench/export.py run=DIR src=file.de ref=file.en

Exports the run's checkpoint (float32 and int8) to a temporary folder, then translates the split
(default: the run's first test set) or the src/ref files with each engine, `repeats` times, the
engines interleaved, each with `threads` threads. Reports per engine the median sentences/s and
target tokens/s (the decoding itself: tokenizing the sources and decoding the ids to text are
outside the timed part, the same for all), the share of outputs identical to minimt fp32's and
BLEU; names the CPU. Writes `out` (default RUN/benchmark_export.json).
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from minimt.checkpoint import save_json
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.data.corpus import read_parallel
from minimt.data.splits import load_held_out, test_set_names
from minimt.export import ctranslate2, export_run
from minimt.exported import ExportedTranslator
from minimt.metrics import corpus_scores
from minimt.provenance import cpu, describe_machine
from minimt.rules import optional, path, positive_int
from minimt.translator import Translator

DEFAULTS = {"run": "???", "checkpoint": "best", "beam": 5, "repeats": 3, "threads": 1}
DEFAULTS |= {"split": None, "src": None, "ref": None, "out": None}
RULES = {"run": path, "beam": positive_int, "repeats": positive_int, "threads": positive_int}
RULES |= {"src": optional(path), "ref": optional(path), "out": optional(path)}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def engines(run: Path, checkpoint: str, threads: int, folder: Path) -> dict[str, Translator]:
    """minimt fp32 and bf16 on the CPU, the run's export in float32 and int8."""
    found = {}
    for precision in ("fp32", "bf16"):
        found[f"minimt {precision}"] = Translator.from_run(run, checkpoint, device="cpu")
        found[f"minimt {precision}"].precision = precision
    for quantization in ("float32", "int8"):
        export = export_run(run, folder / quantization, checkpoint, quantization)
        translator = ExportedTranslator.from_export(export, threads)
        found[f"ctranslate2 {quantization}"] = translator
    return found


def measure(translators: dict[str, Translator], sources: list[str], beam: int, repeats: int):
    """Per engine: seconds of each repeat, and its output ids (the same at every repeat)."""
    seconds: dict[str, list[float]] = {name: [] for name in translators}
    outputs = {}
    for _ in range(repeats):
        for name, translator in translators.items():
            start = time.perf_counter()
            outputs[name] = translator.translate_ids(sources, beam=beam)
            seconds[name].append(time.perf_counter() - start)
    return seconds, outputs


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    setup_logging()
    torch.set_num_threads(args.threads)
    run = Path(args.run)
    if args.src:
        split, (sources, references) = Path(args.src).name, read_parallel(args.src, args.ref)
    else:
        data = Translator.from_run(run, args.checkpoint, device="cpu").config.data
        split = args.split or test_set_names(data)[0]
        sources, references = load_held_out(data, [split])[split]
    with tempfile.TemporaryDirectory(prefix="minimt-export-bench-") as folder:
        translators = engines(run, args.checkpoint, args.threads, Path(folder))
        seconds, outputs = measure(translators, sources, args.beam, args.repeats)
    reference = outputs["minimt fp32"]
    rows = {}
    for name, ids in outputs.items():
        median = statistics.median(seconds[name])
        hyps = translators[name].tokenizers.decode_tgt(ids)
        rows[name] = {
            "sentences_per_sec": len(sources) / median,
            "target_tokens_per_sec": sum(len(h) + 1 for h in ids) / median,  # <eos> counted
            "identical_to_minimt_fp32": sum(a == b for a, b in zip(ids, reference, strict=True))
            / len(ids),
            "bleu": corpus_scores(hyps, references).bleu,
            "seconds": seconds[name],
        }
    report = {
        "run": str(run),
        "checkpoint": args.checkpoint,
        "split": split,
        "sentences": len(sources),
        "beam": args.beam,
        "threads": args.threads,
        "machine": describe_machine({"cpu": cpu()}),
        "torch": torch.__version__,
        "ctranslate2": ctranslate2().__version__,
        "engines": rows,
    }
    save_json(Path(args.out) if args.out else run / "benchmark_export.json", report)
    print(f"{report['machine']}; {split}, {len(sources)} sentences, beam {args.beam}")
    print(f"{'engine':<20} {'sent/s':>8} {'tok/s':>8} {'identical':>9} {'BLEU':>6}")
    for name, row in rows.items():
        print(
            f"{name:<20} {row['sentences_per_sec']:>8.1f} {row['target_tokens_per_sec']:>8.0f} "
            f"{row['identical_to_minimt_fp32']:>9.1%} {row['bleu']:>6.2f}"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
