"""report.md's sections: the answers, what ran, the verdicts and the plan, the lengths."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from minimt.data.length_split import LONG_PREFIX
from minimt.study.questions import answer_plan, plan_scores, planned_alpha
from minimt.study.runs import TIED, Run, scores_of, setting
from minimt.study.significance import NONZERO, PairedDifference, mean, mean_std, rules_in_words

if TYPE_CHECKING:
    from minimt.study.questions import Comparison, Family, PlannedResult
    from minimt.study.report import ConfigResult, Report

RATIO_PLOT = "bleu_vs_ratio_cpu.png"
CAPS = ("max_steps", "max_minutes", "max_epochs")  # stop reasons that are caps, not convergence
PHRASES = {
    "better": "better than its reference",
    "worse": "worse than its reference",
    "equivalent": "equivalent to its reference",
    "inconclusive": "not settled",
}


def table(header: str, rows: Iterable[str]) -> str:
    """A markdown table: `header` and each row are their cells joined by " | "."""
    rule = "| --- " * (header.count(" | ") + 1) + "|"
    return "\n".join([f"| {header} |", rule, *(f"| {row} |" for row in rows)])


def number(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def mean_std_cell(mean: float | None, std: float | None, digits: int = 2) -> str:
    """The mean, "± std" where there is one; "-" without a mean."""
    return number(mean, digits) + ("" if std is None else f" ± {std:.{digits}f}")


def p_cell(p: float | None) -> str:
    return "-" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def estimate_cells(d: PairedDifference | None) -> list[str]:
    """A PairedDifference's mean, unadjusted 95% CI and p as cells ("-" for none)."""
    if d is None:
        return ["-", "-", "-"]
    interval = "-" if d.ci95 is None else f"[{d.ci95[0]:+.2f}, {d.ci95[1]:+.2f}]"
    return [f"{d.mean:+.2f}", interval, p_cell(d.p_value)]


def seeds_cell(seeds: Sequence[int]) -> str:
    return " ".join(map(str, seeds))


def answer(family: Family, margin: float) -> str:
    """One question in one protocol: the comparisons behind each verdict, what has not run, and
    how many of its runs stopped at a cap."""
    context = [family.protocol.title] if family.protocol.name else []
    name = family.protocol.slug
    if not family.comparisons:
        lacking = f": no runs of {', '.join(map(name, family.lacking))}" if family.lacking else ""
        return f"{title(family, context)} Not run{lacking}."
    counts = sorted({c.difference.seeds for c in family.comparisons})
    plural = "s" if counts[0] > 1 else ""
    seeds = f"{counts[0]}-{counts[-1]} seeds" if len(counts) > 1 else f"{counts[0]} seed{plural}"
    context += [seeds, family_size(family)]
    context += [f"exploratory ({family.exploratory})"] if family.exploratory else []
    parts = []
    for verdict, phrase in PHRASES.items():
        found = [c for c in family.comparisons if c.verdict.verdict == verdict]
        if found:
            phrase = phrase.replace("equivalent", f"equivalent (±{margin:g} BLEU)")
            parts.append(f"{phrase.capitalize()}: {cite(found)}.")
    missing = ", ".join(f"{name(c.system)} vs {name(c.reference)}" for c in family.not_run)
    parts += [f"Not run yet: {missing}."] if missing else []
    return " ".join([title(family, context), *parts, caps(family.runs)])


def caps(runs: Sequence[Run]) -> str:
    """How many of the runs a family rests on stopped at a cap rather than by patience."""
    capped = Counter(reason for run in runs if (reason := stopped_by(run.metrics)) in CAPS)
    if not capped:
        return f"None of the {len(runs)} runs this family rests on stopped at a cap."
    (cap, count), *others = sorted(capped.items())
    more = "".join(f" and {n} at trainer.{other}" for other, n in others)
    return (
        f"{count} of the {len(runs)} runs this family rests on stopped at trainer.{cap}{more}, "
        "not by patience."
    )


def title(family: Family, context: Sequence[str]) -> str:
    bold = f"**{family.question.key}. {family.question.title}**"
    return f"{bold} ({'; '.join(context)})" if context else bold


def family_size(family: Family, unit: str = "") -> str:
    if not family.size:
        return "no comparison with 2 seeds yet, so no test"
    planned = planned_alpha(family.protocol.name, family.question.key) == family.alpha
    share = " (the plan's share per look)" if planned else ""
    return f"Holm over {family.size}{unit} at {family.alpha:g}{share}"


def cite(comparisons: Sequence[Comparison]) -> str:
    """'a vs b +1.12; c vs d -0.98 / -2.03 (long_16-18 / long_19-22)': one entry per pair of
    configurations, its differences on each test set."""
    pairs = defaultdict(list)
    for c in comparisons:
        pairs[c.system.slug, c.reference.slug].append(c)
    entries = []
    for (system, reference), found in pairs.items():
        nonzero = [f" ({NONZERO})" if c.verdict.reason == NONZERO else "" for c in found]
        differences = " / ".join(
            f"{c.difference.mean:+.2f}{n}" for c, n in zip(found, nonzero, strict=True)
        )
        sets = [c.test_set for c in found if c.test_set.startswith(LONG_PREFIX)]
        on = f" ({' / '.join(sets)})" if sets else ""
        entries.append(f"{system} vs {reference} {differences}{on}")
    return "; ".join(entries)


def verdict_rules(report: Report) -> str:
    """rules_in_words for the report's families, then the bootstrap's signature."""
    tested = [f for f in report.families if f.size]
    shares = defaultdict(list)  # (protocol, alpha) -> the questions the plan spends less on
    for f in tested:
        if f.alpha != report.rules.alpha:
            shares[f.protocol.title, f.alpha].append(f.question.key)
    planned = "; ".join(f"{' and '.join(keys)} of {t} at {a:g}" for (t, a), keys in shares.items())
    exploratory = {f.protocol.title: f.exploratory for f in tested if f.exploratory}
    marked = "; ".join(f"{title} ({why})" for title, why in exploratory.items())
    text = rules_in_words(report.rules, report.resamples, planned, marked)
    if report.bootstrap_signature:
        text += f"\n\nBootstrap signature: `{report.bootstrap_signature}`"
    return text


def verdict_tables(report: Report) -> str:
    header = (
        "configuration | against | test set | seeds | difference | unadjusted 95% CI | p | "
        "Holm p | TOST Holm p | detectable | seeds needed | bootstrap p per seed | verdict"
    )
    sections = []
    for family in [f for f in report.families if f.comparisons]:
        rows = []
        for c in family.comparisons:
            d, v = c.difference, c.verdict
            needed = [v.seeds_for_difference, v.seeds_for_equivalence]
            needed = " / ".join("-" if n is None else str(n) for n in needed)
            bootstrap = ", ".join(f"{s}: {p:.3f}" for s, p in c.bootstrap.items()) or "-"
            why = f" ({v.reason})" if v.reason else ""
            rows.append(
                f"{c.system.slug} | {c.reference.slug} | {c.test_set} | {d.seeds} "
                f"({seeds_cell(c.seeds)}) | {' | '.join(estimate_cells(d))} | {p_cell(v.holm_p)} | "
                f"{p_cell(v.holm_tost_p)} | {number(v.detectable)} | {needed} | {bootstrap} | "
                f"**{v.verdict}**{why}"
            )
        where = f", {family.protocol.title}" if family.protocol.name else ""
        marked = f"; exploratory ({family.exploratory})" if family.exploratory else ""
        heading = f"### {family.question.key}{where}: {family_size(family, ' comparisons')}{marked}"
        sections.append(f"{heading}\n\n{family.question.title}\n\n" + table(header, rows))
    return "\n\n".join(sections) or "No declared comparison has runs of both sides yet."


def plan_section(report: Report) -> list[str]:
    """The plan's looks with what has run, and the magnitude plot; nothing when no run of the
    plan's protocol records its arm."""
    if not plan_scores(report.runs):
        return []
    text = (
        "The plan of experiment=study_cpu (`minimt.study.questions.PLAN`, docs/study.md), fixed "
        "before its runs. Each look is one family: Holm over all its m tests at its alpha, "
        "tested once every test has all its planned seeds; until then each row shows the "
        "difference over the seeds in so far, as an estimate. An interaction row is the "
        "per-seed difference of the two seed-paired differences, tested against 0. The plot "
        "puts test BLEU against the token : position RMS ratio at the input at init "
        "(metrics.json input_magnitudes, or the value the config gives for runs that predate "
        "that record); it is exploratory."
    )
    plot = f"![bleu against the magnitude ratio]({RATIO_PLOT})"
    return ["## The plan (experiment=study_cpu)", text, plan_table(answer_plan(report.runs)), plot]


def plan_table(results: Sequence[PlannedResult]) -> str:
    """The plan's tests, look by look."""
    rows = []
    for r in results:
        look = r.look
        cells = [look.question, str(look.look), f"{look.alpha:g} (m {len(look.tests)})"]
        cells += [r.test.describe(), seeds_cell(r.test.seeds), seeds_cell(r.seeds) or "-"]
        cells += [*estimate_cells(r.difference), p_cell(r.holm_p), r.verdict]
        rows.append(" | ".join(cells))
    header = (
        "question | look | alpha (Holm over m) | comparison | seeds planned | seeds in | "
        "difference | unadjusted 95% CI | p | Holm p | verdict"
    )
    return table(header, rows)


def configuration_table(rows: Sequence[dict]) -> str:
    """Each configuration's means ± std over seeds and verdicts (scripts/report.py prints it)."""
    header = (
        "configuration | seeds | test BLEU | test chrF | best val BLEU | final val loss | steps | "
        "best step | minutes | parameters | verdict"
    )
    lines = []
    for row in rows:
        cells = [row["slug"], row["seeds"]]
        for name in ("test_bleu", "test_chrf", "best_val_bleu", "final_val_loss"):
            digits = 3 if name == "final_val_loss" else 2
            cells.append(mean_std_cell(row[f"{name}_mean"], row[f"{name}_std"], digits))
        cells += [f"{row['steps_mean']:,.0f}", f"{row['best_step_mean']:,.0f}"]
        cells += [f"{row['minutes_mean']:.1f}", f"{row['num_parameters']:,}"]
        verdicts = [f"{c.verdict.verdict} ({q}, vs {c.reference.slug})" for q, c in row["verdicts"]]
        cells.append("; ".join(verdicts) or ("baseline" if row["is_baseline"] else "-"))
        lines.append(" | ".join(cells))
    return table(header, lines)


def setup_text(report: Report) -> str:
    """Model size and budget from the saved configs, one line per distinct setting."""
    setups = defaultdict(dict)  # description -> slugs, in order, as dict keys
    for result in report.results:
        for run in result.runs:
            setups[setup_description(run)][result.configuration.slug] = None
    if len(setups) == 1:
        return f"Every run: {next(iter(setups))}."
    return "\n".join(f"- {text}: {', '.join(slugs)}" for text, slugs in setups.items())


def setup_description(run: Run) -> str:
    """A run's protocol, model size and training budget in one line."""
    cfg = run.config
    m, t, d = cfg.model, cfg.trainer, cfg.data
    stops = [f"{t.max_steps:,} steps", f"{t.max_minutes:g} minutes"]
    if setting(cfg, "trainer.patience") is not None:
        stops.insert(0, f"patience {t.patience} (min_delta {t.min_delta:g})")
    pairs = d.max_train_pairs
    subset = "" if pairs is None else f"the first {pairs:,} training pairs; "
    protocol = run.configuration.protocol
    named = f"{protocol.title}: " if protocol.name else ""
    return (
        f"{named}model d_model {m.d_model}, {m.n_heads} heads, {m.n_encoder_layers}+"
        f"{m.n_decoder_layers} layers, d_ff {m.d_ff}, dropout {m.dropout:g}, "
        f"{cfg.tokenizer.vocab_size:,} BPE ({'joint' if cfg.tokenizer.joint else 'separate'}); "
        f"{subset}{t.batch_tokens:,} tokens x {t.accumulate} per update, lr {t.lr:g}, warmup "
        f"{t.warmup_steps:,}, validation every {t.val_every:,} steps, stop at " + " / ".join(stops)
    )


def regime_table(report: Report) -> str:
    rows = []
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        runs = [run for result in results for run in result.runs]
        pairs = sorted(
            {run.metrics["data"]["train_pairs"] for run in runs if "data" in run.metrics}
        )
        trained = ", ".join(f"{p:,}" for p in pairs) + " pairs" if pairs else "-"
        slug = protocol.slug(regime.slug)
        rows.append(f"{slug} | {regime.label}; {trained} | {len(results)} | {len(runs)}")
    return table("data regime | training | configurations | runs", rows)


def stopped_by(metrics: dict) -> str:
    """The config key of metrics.json "stop_reason" ('trainer.patience reached ...' -> patience)."""
    reason = metrics.get("stop_reason")
    return "-" if reason is None else reason.split(" reached")[0].removeprefix("trainer.")


def run_table(report: Report) -> str:
    """Each run: why it stopped, its last and best step, its minutes, its test BLEU."""
    rows = []
    for result in report.results:
        for run in result.runs:
            m, bleu = run.metrics, run.scores(report.test_set)["bleu"]
            rows.append(
                f"{result.configuration.slug} | {run.seed} | {stopped_by(m)} | {m['steps']:,} | "
                f"{m['best_step']:,} | {m['train_seconds'] / 60:.1f} | {bleu:.2f}"
            )
    header = "configuration | seed | stopped by | steps | best step | minutes | test BLEU"
    return table(header, rows)


def parameter_table(report: Report) -> str:
    slugs = defaultdict(list)
    for result in report.results:
        share = result.configuration.embedding.share
        slugs[share, result.runs[0].metrics["num_parameters"]].append(result.configuration.slug)
    order = sorted(slugs, key=lambda key: (list(TIED).index(key[0]), key[1]))
    rows = [f"{s} | {TIED[s]} | {n:,} | {', '.join(slugs[s, n])}" for s, n in order]
    header = "tying | tied | parameters | configurations"
    return "metrics.json num_parameters (a shared matrix counted once).\n\n" + table(header, rows)


def training_lengths(report: Report) -> str:
    """The longest training sequence per data regime, and the learned position rows it leaves
    untrained."""
    rows = []
    for protocol, regime in report.regimes:
        results = report.in_regime(protocol, regime)
        data = [run.metrics.get("data", {}) for r in results for run in r.runs]
        keys = ("train_max_src_tokens", "train_max_tgt_tokens")
        src, tgt = (max((d[k] for d in data if k in d), default=None) for k in keys)
        spans = [(r.configuration.slug, untrained_rows(r, src, tgt)) for r in results]
        untrained = "; ".join(f"{slug}: {span}" for slug, span in spans if span is not None)
        longest = " | ".join("-" if n is None else f"{n:,}" for n in (src, tgt))
        rows.append(f"{protocol.slug(regime.slug)} | {longest} | {untrained or '-'}")
    header = "data regime | longest source | longest target | learned positions never trained"
    return (
        'The longest kept training sequence in BPE tokens (metrics.json "data", without '
        "<bos>/<eos>; the longest of any run of the regime). A source of n tokens takes the "
        "positions 0 to n (with its <eos>), a target of n tokens 0 to n (after <bos>); one "
        "learned table serves both sides when both learn positions. Rows past those were never "
        "trained: every test sentence that reaches them is read with rows still at their "
        "initial values.\n\n" + table(header, rows)
    )


def untrained_rows(result: ConfigResult, src: int | None, tgt: int | None) -> str | None:
    """'rows a-b' of the learned position table that no training sequence reached (None without
    learned positions or without the training lengths)."""
    e = result.configuration.embedding
    reached = [n for pe, n in ((e.pe_encoder, src), (e.pe_decoder, tgt)) if pe == "learned"]
    if not reached or None in reached:
        return None
    first, last = max(reached) + 1, result.runs[0].config.model.max_seq_len - 1
    return f"rows {first}-{last}" if first <= last else "none"


def bucket_text(report: Report) -> str:
    """Per configuration with long test sets: its scores on the headline and each bucket."""
    results = [r for r in report.results if r.long_test_sets]
    if not results:
        return (
            "No run has long_* test sets (they come with data.train_max_words or "
            "data.long_tests_over)."
        )
    rows = []
    for result in results:
        for name in [report.test_set, *result.long_test_sets]:
            bleu = mean_std_cell(*mean_std(scores_of(result.runs, name, "bleu")))
            chrf, ratio, early = (
                mean(scores_of(result.runs, name, key))
                for key in ("chrf", "length_ratio", "early_stop_share")
            )
            early = "-" if early is None else f"{100 * early:.1f}%"
            cells = [result.configuration.slug, name, bleu, number(chrf), number(ratio, 3), early]
            rows.append(" | ".join(cells))
    header = "configuration | test set | BLEU | chrF | length ratio | early stops"
    return (
        "Test scores of each held-out long test set (source length in words in its name) next "
        "to the headline set, mean over seeds: BLEU (± std), chrF, the length ratio "
        "(hypothesis / reference length, sacreBLEU's) and the share of hypotheses shorter than "
        "0.8 x their reference (early stops). Their verdicts are Q5's.\n\n" + table(header, rows)
    )


def length_table(report: Report) -> str:
    """The headline test set's BLEU by source-length bucket, or why it is missing."""
    scored = [r for r in report.results if r.by_length]
    if not scored:
        return (
            f"Not computed: the {report.test_set} references could not be read (see the note at "
            "the top)."
        )
    buckets = " | ".join(f"{b['bucket']} words (n={b['n']})" for b in scored[0].by_length)
    rows = [
        " | ".join([r.configuration.slug, *(number(b["bleu"]) for b in r.by_length)])
        for r in scored
    ]
    return (
        f"Test BLEU of the {report.test_set} sentences in each source-length bucket (words), "
        "mean over seeds.\n\n" + table(f"configuration | {buckets}", rows)
    )


def long_input_table(report: Report) -> str:
    ks = sorted({k for r in report.results for k in r.long_inputs})
    rows = []
    for r in report.results:
        scores = [r.long_inputs.get(k) for k in ks]
        cells = [
            "-" if s is None else f"{number(s['bleu'])} ({s['mean_src_words']:.0f} words)"
            for s in scores
        ]
        rows.append(" | ".join([r.configuration.slug, *cells]))
    header = " | ".join(["configuration", *(f"k={k}" for k in ks)])
    return (
        "Greedy BLEU when k consecutive test sentences are joined into one input (source and "
        "reference alike), mean over seeds, with the mean source length in words "
        "(decoding.long_inputs). It measures sentence splitting more than positions.\n\n"
        + table(header, rows)
    )
