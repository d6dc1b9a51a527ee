"""Decoding speed of a trained run on one of its splits, side by side in one process.

    python scripts/bench/decoding.py run=DIR [repeats=3] [checkpoint=best]

Measures sentences/s over a whole split (default: the run's first test set) for cached greedy,
uncached greedy (the decoder re-run over the whole prefix every step) and cached beam 5, each
`repeats` times interleaved; prints medians and ratios and writes RUN/benchmark_decoding.json.
Also reports BLEU of each.
"""

import sys
from pathlib import Path

import torch
from benchmark import decoding_rates

from minimt.checkpoint import save_json
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.data.splits import load_held_out, test_set_names
from minimt.translator import Translator

DEFAULTS = {"run": "???", "checkpoint": "best", "repeats": 3, "split": None}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    run = Path(args.run)
    translator = Translator.from_run(run, args.checkpoint)
    data = translator.config.data
    split = args.split or test_set_names(data)[0]
    sources, references = load_held_out(data, [split])[split]
    rates, seconds, bleu = decoding_rates(translator, sources, references, args.repeats)
    report = {
        "run": str(run),
        "split": split,
        "sentences": len(sources),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "precision": translator.precision,
        "device": str(next(translator.model.parameters()).device),
        "sentences_per_sec": rates,
        "seconds": seconds,
        "bleu": bleu,
        "cached_over_uncached_greedy": rates["greedy_cached"] / rates["greedy_uncached"],
    }
    save_json(run / "benchmark_decoding.json", report)
    print(f"{'variant':<16} {'sent/s (median)':>16} {'BLEU':>6}")
    for name, rate in rates.items():
        print(f"{name:<16} {rate:>16.1f} {bleu[name]:>6.2f}")
    print(f"cached / uncached greedy: {report['cached_over_uncached_greedy']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
