"""One-off A/B of commit 5117071 (beam search ranks each hypothesis's own best 2 * beam tokens):
beam-5 decoding of test_2016_flickr with the trained default run, the ranking before the commit
and after it swapped in turn in one process, `rounds` rounds; writes beam_topk_ab.json here.

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


def ranking_before(log_probs, step_log_probs, beam):
    """best_extensions before 5117071: the top 2 * beam of all k * V sums of a sentence."""
    vocab = step_log_probs.size(-1)
    totals = (log_probs.view(-1, 1) + step_log_probs).view(log_probs.size(0), -1)
    cand_log_probs, cand = totals.topk(2 * beam, dim=1)
    return cand_log_probs, cand // vocab, cand % vocab


def main(run: str, rounds: int) -> None:
    translator = Translator.from_run(Path(run), "best")
    split = test_set_names(translator.config.data)[0]
    sources, _ = load_held_out(translator.config.data, [split])[split]
    variants = {"before": ranking_before, "after": search.best_extensions}
    seconds = {name: [] for name in variants}
    outputs = {}
    for _ in range(rounds):
        for name, ranking in variants.items():
            search.best_extensions = ranking
            start = time.perf_counter()
            outputs[name] = translator.translate(sources, beam=5)
            seconds[name].append(time.perf_counter() - start)
    ratios = [b / a for b, a in zip(seconds["before"], seconds["after"], strict=True)]
    report = {
        "run": run,
        "sentences": len(sources),
        "threads": torch.get_num_threads(),
        "sentences_per_s": {n: [len(sources) / s for s in v] for n, v in seconds.items()},
        "median_sentences_per_s": {
            n: len(sources) / statistics.median(v) for n, v in seconds.items()
        },
        "median_speedup_per_round": statistics.median(ratios),
        "same_translations": outputs["before"] == outputs["after"],
    }
    Path(__file__).with_name("beam_topk_ab.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
