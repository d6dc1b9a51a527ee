"""Decoding speed of this checkout's search against another commit's, side by side in one process.

    python scripts/bench/decoding_against.py run=DIR rev=COMMIT [repeats=3] [threads=1] [out=FILE]

Loads minimt/model/search.py as it was at `rev` (git show) beside today's, and decodes the run's
first test set with each in turn, greedy and beam 5 (the key/value cache on), `repeats` times
interleaved. Times are the process's CPU seconds (time.process_time), steadier than wall time on a
machine whose speed drifts; prints the medians, today's over `rev`'s (of the medians, and the
median of each repeat's back-to-back pair), and whether both wrote the same translations, and
writes them as JSON to `out` when given.
"""

import importlib.util
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch

import minimt.model.search as search_now
import minimt.translator as translator_module
from minimt.atomic import write_text
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.data.splits import load_held_out, test_set_names
from minimt.errors import MinimtError

DEFAULTS = {"run": "???", "rev": "???", "repeats": 3, "threads": 1, "out": None}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
VARIANTS = {"greedy": 1, "beam5": 5}


def search_at(rev: str) -> ModuleType:
    """minimt.model.search as committed at `rev`, imported under another name."""
    shown = subprocess.run(
        ["git", "show", f"{rev}:src/minimt/model/search.py"], capture_output=True, text=True
    )
    if shown.returncode != 0:
        raise MinimtError(f"rev={rev}: git show cannot read its search.py: {shown.stderr.strip()}")
    path = Path(tempfile.mkdtemp()) / "search_at_rev.py"
    path.write_text(shown.stdout, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("search_at_rev", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def taking_lengths(decode: Callable) -> Callable:
    """`decode`, accepting the src_lengths today's Translator passes where it predates them."""
    if "src_lengths" in inspect.signature(decode).parameters:
        return decode

    def call(*args: object, src_lengths: object = None, **kwargs: object) -> object:
        return decode(*args, **kwargs)

    return call


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    torch.set_num_threads(args.threads)
    translator = translator_module.Translator.from_run(Path(args.run), "best")
    split = test_set_names(translator.config.data)[0]
    sources, _ = load_held_out(translator.config.data, [split])[split]
    searches = {args.rev: search_at(args.rev), "now": search_now}
    seconds = {(variant, name): [] for variant in VARIANTS for name in searches}
    outputs = {}
    for _ in range(args.repeats):
        for variant, beam in VARIANTS.items():
            for name, search in searches.items():
                translator_module.greedy_decode = taking_lengths(search.greedy_decode)
                translator_module.beam_search = taking_lengths(search.beam_search)
                start = time.process_time()
                outputs[variant, name] = translator.translate(sources, beam=beam)
                seconds[variant, name].append(time.process_time() - start)
    result = {"run": args.run, "rev": args.rev, "split": split, "sentences": len(sources)}
    result |= {"threads": args.threads, "torch": torch.__version__}
    for variant in VARIANTS:
        rates = {
            name: len(sources) / statistics.median(seconds[variant, name]) for name in searches
        }
        same = outputs[variant, args.rev] == outputs[variant, "now"]
        result[variant] = {"sentences_per_cpu_second": rates, "identical_outputs": same}
        result[variant]["now_over_rev"] = rates["now"] / rates[args.rev]
        # each repeat's pair ran back to back: their ratio is free of the machine's slow drift
        pairs = zip(seconds[variant, args.rev], seconds[variant, "now"], strict=True)
        paired = [then / now for then, now in pairs]
        result[variant]["median_paired_now_over_rev"] = statistics.median(paired)
        result[variant]["cpu_seconds"] = {name: seconds[variant, name] for name in searches}
        print(
            f"{variant:<7} {args.rev}: {rates[args.rev]:.1f}  now: {rates['now']:.1f} sentences "
            f"per CPU second, now / {args.rev} {rates['now'] / rates[args.rev]:.3f} (median of "
            f"the paired repeats' {statistics.median(paired):.3f}), "
            f"{'identical' if same else 'DIFFERENT'} translations"
        )
    if args.out:
        write_text(args.out, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
