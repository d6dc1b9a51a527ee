"""One-off A/B of a beam-search ranking tried on 2026-11-23 and not kept (commit 5117071, reverted):
each hypothesis's own best 2 * beam tokens (top-k per row), then the k * 2 * beam sums, against
minimt's best_extensions (the top 2 * beam of all k * V sums). Beam-5 decoding of
test_2016_flickr with the trained default run, the two swapped in turn in one process, `rounds`
rounds; writes beam_topk_ab.json here.

    PYTHONPATH=src python docs/perf/2026-11-23/beam_topk_ab.py outputs/perf30 6
"""

import json
import statistics
import sys
import time
from pathlib import Path

import torch

from minimt.data.splits import load_held_out, test_set_names
from minimt.model import search
from minimt.translator import Translator


def ranking_per_row(log_probs, step_log_probs, beam):
    """The tried ranking: each row's best 2 * beam tokens, then the best of their sums."""
    n_best = 2 * beam
    row_log_probs, row_tokens = step_log_probs.topk(n_best, dim=1)
    totals = (log_probs.view(-1, 1) + row_log_probs).view(log_probs.size(0), -1)
    cand_log_probs, cand = totals.topk(n_best, dim=1)
    cand_token = row_tokens.view(log_probs.size(0), -1).gather(1, cand)
    return cand_log_probs, cand // n_best, cand_token


def main(run: str, rounds: int) -> None:
    translator = Translator.from_run(Path(run), "best")
    split = test_set_names(translator.config.data)[0]
    sources, _ = load_held_out(translator.config.data, [split])[split]
    variants = {"full_ranking": search.best_extensions, "per_row": ranking_per_row}
    seconds = {name: [] for name in variants}
    outputs = {}
    for _ in range(rounds):
        for name, ranking in variants.items():
            search.best_extensions = ranking
            start = time.perf_counter()
            outputs[name] = translator.translate(sources, beam=5)
            seconds[name].append(time.perf_counter() - start)
    ratios = [f / p for f, p in zip(seconds["full_ranking"], seconds["per_row"], strict=True)]
    report = {
        "run": run,
        "sentences": len(sources),
        "threads": torch.get_num_threads(),
        "sentences_per_s": {n: [len(sources) / s for s in v] for n, v in seconds.items()},
        "median_sentences_per_s": {
            n: len(sources) / statistics.median(v) for n, v in seconds.items()
        },
        "median_per_row_speedup_per_round": statistics.median(ratios),
        "same_translations": outputs["full_ranking"] == outputs["per_row"],
    }
    Path(__file__).with_name("beam_topk_ab.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
