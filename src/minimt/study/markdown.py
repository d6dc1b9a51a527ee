"""report.md's sections: the answers, what ran, the verdict rules and tables, the plans, the long
test sets (minimt.study.report puts them together)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from minimt.data.length_split import LONG_PREFIX
from minimt.study.answers import Answer, Comparison
from minimt.study.runs import Configuration, Run, long_test_sets, scores_of
from minimt.study.significance import MAX_SEEDS, NONZERO, NOT_AFTER_HOLM, Rules, mean, mean_std

CAPS = ("max_steps", "max_minutes", "max_epochs")  # stop reasons that are caps, not convergence


def table(header: str, rows: Iterable[str]) -> str:
    """A markdown table: `header` and each row are their cells joined by " | "."""
    rule = "| --- " * (header.count(" | ") + 1) + "|"
    return "\n".join([f"| {header} |", rule, *(f"| {row} |" for row in rows)])


def number(value: float | None, digits: int = 2, sign: str = "") -> str:
    return "-" if value is None else f"{value:{sign}.{digits}f}"


def mean_std_cell(mean: float | None, std: float | None, digits: int = 2) -> str:
    """The mean, "± std" where there is one; "-" without a mean."""
    return number(mean, digits) + ("" if std is None else f" ± {std:.{digits}f}")


def interval_cell(low: float | None, high: float | None) -> str:
    """A 95% interval "[-0.91, -0.09]"; "-" without one."""
    return "-" if low is None else f"[{low:+.2f}, {high:+.2f}]"


def p_cell(p: float | None) -> str:
    return "-" if p is None else f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def look_name(a: Answer) -> str:
    """The look its verdicts are from, in words: "look 2", or "before its first look"."""
    return f"look {a.look}" if a.look else "before its first look"


def answer(a: Answer, margin: float) -> str:
    """One family in one protocol: the comparisons behind each verdict, what has not run, and
    how many of its runs stopped at a cap."""
    look = f", {look_name(a)}" if a.family.planned else ""
    heading = f"**{a.family.question}{look}. {a.family.title}**"
    marked = [f"exploratory ({a.exploratory})"] if a.exploratory else []
    context = [a.protocol.title]
    if not a.comparisons:
        return f"{heading} ({'; '.join(context + marked)}) Not run."
    counts = sorted({len(c.seeds) for c in a.comparisons})
    plural = "s" if counts[-1] != 1 else ""
    seeds = f"{counts[0]}-{counts[-1]} seeds" if len(counts) > 1 else f"{counts[0]} seed{plural}"
    context += [seeds, family_size(a), *marked]
    parts = [f"{heading} ({'; '.join(context)})"]
    phrases = {"better": "Better than its reference", "worse": "Worse than its reference"}
    equivalent = f"Equivalent (±{margin:g} BLEU) to its reference"
    phrases |= {"equivalent": equivalent, "inconclusive": "Not settled"}
    phrases["continue"] = "Undecided, to the next look"
    phrases["non-inferior"] = "Not worse than its reference by the margin or more"
    for verdict, phrase in phrases.items():
        found = [c for c in a.comparisons if c.verdict and c.verdict.verdict == verdict]
        parts += [f"{phrase}: {cite(found)}."] if found else []
    if a.family.looks:
        parts.append(f"Looks analysed: {a.looks_analysed} of {len(a.family.looks)}.")
        if command := a.next_look_command():
            parts.append(f"Next look's runs: `{command}`.")
    elif not a.complete:
        parts.append(f"Waiting for planned seeds, as estimates: {cite(a.tested)}.")
    if secondary := [c for c in a.comparisons if c.secondary]:
        parts.append(f"On the secondary test sets, not tested: {cite(secondary)}.")
    if mixed := [c for c in a.comparisons if c.mixes_machines]:
        parts.append(f"Runs on more than one machine: {mixed_machines(mixed)}.")
    missing = ", ".join(test.describe() for test in a.not_run)
    parts += [f"Not run yet: {missing}."] if missing else []
    return " ".join([*parts, caps(a.runs)] if a.runs else parts)


def caps(runs: Sequence[Run]) -> str:
    """How many of the runs a family rests on stopped at a cap rather than by patience."""
    capped = Counter(reason for run in runs if (reason := run.stopped_by) in CAPS)
    if not capped:
        return f"None of the {len(runs)} runs this family rests on stopped at a cap."
    (cap, n), *others = sorted(capped.items())
    more = "".join(f" and {k} at trainer.{other}" for other, k in others)
    runs = f"{n} of the {len(runs)} runs this family rests on"
    return f"{runs} stopped at trainer.{cap}{more}, not by patience."


def family_size(a: Answer, unit: str = "") -> str:
    if a.family.looks:
        looks = ", ".join(map(str, a.family.looks))
        return (
            f"group-sequential, looks at {looks} seeds, O'Brien-Fleming spending, Holm in "
            f"graphical form over {len(a.family.tests)}{unit} at {a.family.alpha:g} per claim type"
        )
    if not a.size:
        return "no comparison with 2 seeds yet, so no test"
    share = " (as planned)" if a.alpha == a.family.alpha else ""
    waiting = "" if a.complete else "to be tested: "
    return f"{waiting}Holm over {a.size}{unit} at {a.alpha:g}{share}"


def cite(comparisons: Sequence[Comparison]) -> str:
    """'a vs b +1.12; c vs d -0.98 / -2.03 (long_16-18 / long_19-22)': one entry per test, its
    differences on each test set."""
    tests = defaultdict(list)
    for c in comparisons:
        tests[c.test].append(c)
    entries = []
    for test, found in tests.items():
        differences = " / ".join(
            number(c.difference and c.difference.mean, sign="+")
            + (f" ({NONZERO})" if c.verdict and c.verdict.reason == NONZERO else "")
            for c in found
        )
        sets = [c.test_set for c in found if c.test_set.startswith(LONG_PREFIX) or c.secondary]
        on = f" ({' / '.join(sets)})" if sets else ""
        entries.append(f"{test.describe()} {differences}{on}")
    return "; ".join(entries)


def mixed_machines(comparisons: Sequence[Comparison]) -> str:
    """'a vs b (a on AMD EPYC (1-3), ...; b on ...)', once per test."""
    tests = {c.test: c for c in comparisons}.values()
    return "; ".join(f"{c.test.describe()} ({c.describe_machines()})" for c in tests)


def rules_text(rules: Rules, answers: Sequence[Answer]) -> str:
    """The verdict rules, with the alphas the plan sets and the protocols planned after their
    data."""
    alphas = defaultdict(dict)  # (protocol, alpha) -> the questions the plan sets it for
    for a in answers:
        if a.comparisons and a.alpha != rules.alpha:
            alphas[a.protocol.title, a.alpha][a.family.question] = None
    planned = "; ".join(f"{' and '.join(qs)} of {t} at {x:g}" for (t, x), qs in alphas.items())
    exploratory = dict.fromkeys(
        f"{a.protocol.title} ({a.exploratory})" for a in answers if a.exploratory and a.size
    )
    at_plan = f" ({planned} as planned)" if planned else ""
    text = (
        "How a verdict is reached: docs/study.md. In short: comparisons are made within one "
        "protocol, seed s paired with seed s; *difference* is the mean over paired seeds of test "
        "BLEU (first minus second) with its **unadjusted 95% CI** (not a verdict) and the paired "
        f"t-test's p. Holm's correction runs within each family at {rules.alpha:g}{at_plan}, "
        "one chain per claim type (differences; equivalence), so a family's chance of any false "
        "claim of either kind can reach twice its alpha. **better / worse**: Holm p < alpha. "
        f"**equivalent**: TOST Holm p < alpha against ±{rules.margin:g} BLEU (shown both ways: "
        f"*{NONZERO}*). **inconclusive**: *too few seeds* or, inside the margin, "
        f"*{NOT_AFTER_HOLM}*. *detectable* and *seeds needed* (difference / equivalence) are at "
        f"{rules.power:.0%} power, from the exact power of the paired t-test at alpha / family "
        "size and the family's pooled seed spread: *seeds needed* holds if the true difference "
        f"equals the observed one (- where never reached or above {MAX_SEEDS})."
    )
    if exploratory:
        text += (
            f"\n\n**Exploratory**: {'; '.join(exploratory)}: its families without a look and the "
            "margin were written after the runs they rest on had been analysed, so their verdicts "
            "are exploratory; new seeds test them only under a plan written first (with a look)."
        )
    return text


def verdict_tables(answers: Sequence[Answer]) -> str:
    header = (
        "comparison | test set | seeds | difference | unadjusted 95% CI | p | Holm p | "
        "TOST Holm p | detectable | seeds needed | verdict"
    )
    sections = []
    for a in [a for a in answers if a.comparisons]:
        rows = []
        for c, r in zip(a.comparisons, map(a.record, a.comparisons), strict=True):
            seeds = f"{len(r['paired_seeds'].split())} ({r['paired_seeds'] or '-'})"
            if c.mixes_machines:
                seeds += f"; {c.describe_machines()}"
            if c.unpaired:
                seeds += f"; {c.describe_unpaired()}"
            ci = interval_cell(r["ci95_low"], r["ci95_high"])
            needed = [r["seeds_for_difference"], r["seeds_for_equivalence"]]
            needed = " / ".join("-" if k is None else str(k) for k in needed)
            verdict = r["verdict"] if r["verdict"].startswith("waiting") else f"**{r['verdict']}**"
            cells = [r["comparison"], r["test_set"], seeds, number(r["difference"], sign="+"), ci]
            cells += [p_cell(r["p_value"]), p_cell(r["holm_p"]), p_cell(r["tost_holm_p"])]
            cells += [number(r["detectable"]), needed if r["holm_p"] is not None else "-"]
            cells.append(verdict + (f" ({r['reason']})" if r["reason"] else ""))
            rows.append(" | ".join(cells))
        marked = f"; exploratory ({a.exploratory})" if a.exploratory else ""
        look = f" ({look_name(a)})" if a.family.planned else ""
        size = family_size(a, " comparisons")
        heading = f"### {a.family.question}{look}, {a.protocol.title}: {size}{marked}"
        sections.append(f"{heading}\n\n{a.family.title}\n\n" + table(header, rows))
    return "\n\n".join(sections) or "No declared comparison has runs of both sides yet."


def plan_text(planned: Sequence[str]) -> str:
    """How the families of the plans `planned` (their names) are read, and the magnitude plot."""
    return (
        f"The plan files {', '.join(f'{name}.yaml' for name in planned)} (configs/plan; "
        "docs/plans.md), each family fixed before its runs. Each family is "
        "one look, tested (Holm over all its m tests) once every test has all its planned seeds; "
        "until then a row is an estimate. A group-sequential family (with looks) is tested at "
        "each look whose seeds are in, its rows on that look's seeds; the runs in since wait for "
        "the next look. An interaction is the per-seed difference of two "
        "differences. The plot (exploratory) puts test BLEU against the token : position RMS "
        "ratio at the input at init (bleu_vs_ratio_<protocol>.png, under Plots)."
    )


def configuration_table(rows: Sequence[dict]) -> str:
    """Each configuration's means ± std over seeds (scripts/report.py prints it)."""
    header = (
        "protocol | configuration | seeds | test BLEU by seed | test BLEU | test chrF | best val "
        "BLEU | final val loss | steps | best step | stopped by | minutes | training pairs | "
        "parameters"
    )
    lines = []
    for row in rows:
        cells = [row["protocol"], row["configuration"], row["seeds"], row["test_bleu_by_seed"]]
        for name in ("test_bleu", "test_chrf", "best_val_bleu", "final_val_loss"):
            digits = 3 if name == "final_val_loss" else 2
            cells.append(mean_std_cell(row[f"{name}_mean"], row[f"{name}_std"], digits))
        cells += [f"{row['steps_mean']:,.0f}", f"{row['best_step_mean']:,.0f}", row["stopped_by"]]
        pairs = "-" if row["train_pairs"] is None else f"{row['train_pairs']:,}"
        cells += [f"{row['minutes_mean']:.1f}", pairs, f"{row['num_parameters']:,}"]
        lines.append(" | ".join(cells))
    return table(header, lines)


SETUP = "model.d_model model.n_heads model.n_encoder_layers model.n_decoder_layers model.d_ff "
SETUP += "model.dropout tokenizer.vocab_size trainer.batch_tokens trainer.accumulate trainer.lr "
SETUP += "trainer.warmup_steps trainer.val_every trainer.patience trainer.min_delta "
SETUP += "trainer.max_steps trainer.max_minutes"


def setup_text(groups: dict[Configuration, list[Run]]) -> str:
    """Each protocol's model and training settings: every value its runs used, "/" between."""
    lines = []
    for protocol in dict.fromkeys(c.protocol for c in groups):
        runs = [run for c, found in groups.items() if c.protocol == protocol for run in found]
        used = {k: dict.fromkeys(str(run.setting(k)) for run in runs) for k in SETUP.split()}
        values = " ".join(f"{k}={'/'.join(v)}" for k, v in used.items())
        lines.append(f"- {protocol.title}: {values}")
    return "\n".join(lines)


def long_test_text(groups: dict[Configuration, list[Run]], headline: str) -> str:
    """Per configuration with long test sets: its scores on the headline and each of them."""
    rows = []
    for c, runs in groups.items():
        sets = long_test_sets(runs)
        for name in [headline, *sets] if sets else []:
            bleu = mean_std_cell(*mean_std(scores_of(runs, name, "bleu")))
            keys = ("chrf", "length_ratio", "early_stop_share")
            chrf, ratio, early = (mean(scores_of(runs, name, key)) for key in keys)
            early = "-" if early is None else f"{100 * early:.1f}%"
            rows.append(" | ".join([c.name, name, bleu, number(chrf), number(ratio, 3), early]))
    if not rows:
        return "No run has long_* test sets (data.train_max_words or data.long_tests_over)."
    header = "configuration | test set | BLEU | chrF | length ratio | early stops"
    return (
        "Each held-out long test set (source words in its name) beside the headline set, mean "
        "over seeds: BLEU (± std), chrF, length ratio (sacreBLEU's) and the share of hypotheses "
        "shorter than 0.8 x their reference (early stops). Verdicts: Q5.\n\n" + table(header, rows)
    )
