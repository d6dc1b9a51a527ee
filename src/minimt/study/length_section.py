"""The report's length section: scores on the held-out long test sets, the headline test set by
source length, and joined inputs; and the per-configuration data they are computed from."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from minimt.study.compare import Translations
from minimt.study.lengths import DEFAULT_EDGES, bleu_by_bucket
from minimt.study.results import Report, long_test_sets, mean, mean_std, scores_of
from minimt.study.runs import Run
from minimt.study.tables import markdown_table, mean_std_cell, number


def bleu_by_length(runs: Sequence[Run], test_set: str, translations: Translations) -> list[dict]:
    """BLEU per source-length bucket of a test set, averaged over the runs (empty when none can
    be scored)."""
    per_run = []
    for run in runs:
        found = translations.of(run, test_set)
        if found is not None:
            hyps, (srcs, refs) = found
            per_run.append(bleu_by_bucket(hyps, refs, srcs, DEFAULT_EDGES))
    return [
        {**rows[0], "bleu": mean([row["bleu"] for row in rows if row["bleu"] is not None])}
        for rows in zip(*per_run, strict=True)
    ]


def long_input_bleu(runs: Sequence[Run], test_set: str) -> dict[int, dict]:
    """metrics.json "long_inputs" of `test_set` averaged over the runs: k -> bleu, words."""
    per_k: dict[int, list[dict]] = defaultdict(list)
    for run in runs:
        for k, scores in run.metrics.get("long_inputs", {}).get(test_set, {}).items():
            per_k[int(k)].append(scores)
    return {
        k: {key: mean([s[key] for s in scores]) for key in ("bleu", "mean_src_words")}
        for k, scores in sorted(per_k.items())
    }


def bucket_text(report: Report) -> str:
    """Per configuration with long test sets: its scores on the headline and each bucket."""
    results = [r for r in report.results if long_test_sets(r)]
    if not results:
        return (
            "No run has long_* test sets (they come with data.train_max_words or "
            "data.long_tests_over)."
        )
    cells = []
    for result in results:
        for name in [report.test_set, *long_test_sets(result)]:
            runs = result.runs
            bleu_mean, bleu_std = mean_std(scores_of(runs, name, "bleu"))
            early = mean(scores_of(runs, name, "early_stop_share"))
            cells.append(
                [
                    result.configuration.slug,
                    name,
                    mean_std_cell({"bleu_mean": bleu_mean, "bleu_std": bleu_std}, "bleu", 2),
                    number(mean(scores_of(runs, name, "chrf"))),
                    number(mean(scores_of(runs, name, "length_ratio")), 3),
                    "-" if early is None else f"{100 * early:.1f}%",
                ]
            )
    header = ["configuration", "test set", "BLEU", "chrF", "length ratio", "early stops"]
    return (
        "Test scores of each held-out long test set (source length in words in its name) next "
        "to the headline set, mean over seeds: BLEU (± std), chrF, the length ratio "
        "(hypothesis / reference length, sacreBLEU's) and the share of hypotheses shorter than "
        "0.8 x their reference (early stops). Their verdicts are Q5's.\n\n"
        + markdown_table(header, cells)
    )


def length_table(report: Report) -> str:
    """The headline test set's BLEU by source-length bucket, or why it is missing."""
    scored = [r for r in report.results if r.by_length]
    if not scored:
        return (
            f"Not computed: the {report.test_set} references could not be read (see the note at "
            "the top)."
        )
    buckets = scored[0].by_length
    header = ["configuration", *(f"{b['bucket']} words (n={b['n']})" for b in buckets)]
    cells = [
        [result.configuration.slug, *(number(b["bleu"]) for b in result.by_length)]
        for result in scored
    ]
    return (
        f"Test BLEU of the {report.test_set} sentences in each source-length bucket (words), "
        "mean over seeds.\n\n" + markdown_table(header, cells)
    )


def long_input_table(report: Report) -> str:
    ks = sorted({k for r in report.results for k in r.long_inputs})
    cells = []
    for result in report.results:
        row = [result.configuration.slug]
        for k in ks:
            scores = result.long_inputs.get(k)
            row.append(
                "-"
                if scores is None
                else f"{number(scores['bleu'])} ({scores['mean_src_words']:.0f} words)"
            )
        cells.append(row)
    return (
        "Greedy BLEU when k consecutive test sentences are joined into one input (source and "
        "reference alike), mean over seeds, with the mean source length in words "
        "(decoding.long_inputs). It measures sentence splitting more than positions.\n\n"
        + markdown_table(["configuration", *(f"k={k}" for k in ks)], cells)
    )
