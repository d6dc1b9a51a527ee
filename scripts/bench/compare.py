"""Before/after table of two benchmark.json files (and, optionally, two benchmark_decoding.json).

    python scripts/bench/compare.py before=docs/perf/2026-11-23/benchmark_before.json \
        after=docs/perf/2026-11-23/benchmark_after.json \
        decoding_before=docs/perf/2026-11-23/decoding_before.json \
        decoding_after=docs/perf/2026-11-23/decoding_after.json

Prints a markdown table: training tokens/s and MFU, decoding sentences/s, peak RSS, ratios.
"""

import json
import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args

DEFAULTS = {"before": "???", "after": "???", "decoding_before": None, "decoding_after": None}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def benchmark_rows(report: dict) -> dict[str, float]:
    rows = {
        "training target tokens/s": report["training"]["tgt_tokens_per_s"],
        f"MFU ({report['precision']} roof)": 100 * report["training"]["mfu"],
        "peak RSS of the benchmark (MB)": report["peak_rss_mb"],
    }
    sentences = report["decoding"]["sentences"]
    for name, rate in report["decoding"]["sentences_per_s"].items():
        rows[f"{name} sentences/s (benchmark, {sentences} sentences)"] = rate
    return rows


def decoding_rows(report: dict) -> dict[str, float]:
    sentences = report["sentences"]
    return {
        f"{name} sentences/s ({report['split']}, {sentences} sentences)": rate
        for name, rate in report["sentences_per_sec"].items()
    }


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    before = benchmark_rows(json.loads(Path(args.before).read_text()))
    after = benchmark_rows(json.loads(Path(args.after).read_text()))
    if args.decoding_before and args.decoding_after:
        before |= decoding_rows(json.loads(Path(args.decoding_before).read_text()))
        after |= decoding_rows(json.loads(Path(args.decoding_after).read_text()))
    print("| measure | before | after | after / before |\n| --- | --- | --- | --- |")
    for name, old in before.items():
        new = after[name]
        print(f"| {name} | {old:,.1f} | {new:,.1f} | {new / old:.2f}x |")


if __name__ == "__main__":
    main(sys.argv[1:])
