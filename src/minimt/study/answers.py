"""The report's answers: one paragraph per question and protocol (the answer, with the
comparisons it rests on), then the verdict rules and one verdict table per question."""

from __future__ import annotations

from collections.abc import Sequence

from minimt.study.compare import Comparison, Family
from minimt.study.results import Report
from minimt.study.runs import LONG_PREFIX
from minimt.study.tables import interval_cell, markdown_table, number, p_cell
from minimt.study.verdicts import MAX_SEEDS

PHRASES = {
    "better": "better than its reference",
    "worse": "worse than its reference",
    "equivalent": "equivalent to its reference",
    "inconclusive": "not settled",
}


def answer_paragraphs(report: Report) -> str:
    """One paragraph per question and protocol; a question without comparisons is said to be
    not run for the first protocol only (the CPU regime answers Q2 alone)."""
    first = report.protocols[0]
    shown = [f for f in report.families if f.comparisons or f.protocol == first]
    return "\n\n".join(_answer(family, report.rules.margin) for family in shown)


def _answer(family: Family, margin: float) -> str:
    context = [family.protocol.title] if family.protocol.name else []
    name = family.protocol.slug
    if not family.comparisons:
        lacking = f": no runs of {', '.join(map(name, family.lacking))}" if family.lacking else ""
        return f"{_title(family, context)} Not run{lacking}."
    seeds = sorted({c.difference.seeds for c in family.comparisons})
    context += [_seeds(seeds), _family_size(family)]
    parts = []
    for verdict, phrase in PHRASES.items():
        found = [c for c in family.comparisons if c.verdict.verdict == verdict]
        if found:
            phrase = phrase.replace("equivalent", f"equivalent (±{margin:g} BLEU)")
            parts.append(f"{phrase.capitalize()}: {_cite(found)}.")
    missing = ", ".join(f"{name(c.system)} vs {name(c.reference)}" for c in family.not_run)
    if missing:
        parts.append(f"Not run yet: {missing}.")
    return f"{_title(family, context)} " + " ".join(parts)


def _title(family: Family, context: Sequence[str]) -> str:
    title = f"**{family.question.key}. {family.question.title}**"
    return f"{title} ({'; '.join(context)})" if context else title


def _family_size(family: Family, unit: str = "") -> str:
    if family.size:
        return f"Holm over {family.size}{unit}"
    return "no comparison with 2 seeds yet, so no test"


def _seeds(counts: Sequence[int]) -> str:
    if len(counts) == 1:
        return f"{counts[0]} seed{'s' if counts[0] > 1 else ''}"
    return f"{counts[0]}-{counts[-1]} seeds"


def _cite(comparisons: Sequence[Comparison]) -> str:
    """'a vs b +1.12; c vs d -0.98 / -2.03 (long_16-18 / long_19-22)': one entry per pair of
    configurations, its differences on each test set."""
    pairs: dict[tuple[str, str], list[Comparison]] = {}
    for c in comparisons:
        pairs.setdefault((c.system.slug, c.reference.slug), []).append(c)
    entries = []
    for (system, reference), found in pairs.items():
        differences = " / ".join(f"{c.difference.mean:+.2f}" for c in found)
        sets = [c.test_set for c in found if c.test_set.startswith(LONG_PREFIX)]
        on = f" ({' / '.join(sets)})" if sets else ""
        entries.append(f"{system} vs {reference} {differences}{on}")
    return "; ".join(entries)


def verdict_rules(report: Report) -> str:
    r = report.rules
    text = (
        "Each question declares its comparisons before the runs (`minimt.study.questions`); "
        "they are made within one protocol, never across. Seed s of one side is paired with "
        "seed s of the other; *difference* is the mean over the paired seeds of test BLEU "
        "(configuration minus the one it is compared against), with its 95% confidence "
        "interval (Student t, n - 1 degrees of freedom) and the two-sided paired t-test's p. "
        f"**Holm's correction runs within each question** (its family: the comparisons with a "
        f"p-value in one protocol; the size is in each table's heading), at a family-wise "
        f"{r.alpha:g}. **better / worse**: Holm p < {r.alpha:g}. **equivalent**: the two "
        f"one-sided t-tests reject a difference of ±{r.margin:g} BLEU or more, Holm-adjusted "
        f"within the family too (TOST Holm p < {r.alpha:g}); a difference shown both ways is "
        "called better or worse. **inconclusive**: neither, with the reason: *too few seeds* "
        "(how many a verdict would need) or *a real but small effect* (the 95% interval "
        f"excludes 0 but the difference lies inside ±{r.margin:g}). *detectable* is the "
        "smallest difference the row's seeds detect with "
        f"{r.power:.0%} power at {r.alpha:g} / family size, from the family's pooled seed "
        "spread of the paired differences: (t(1 - a/2, n - 1) + t(power, n - 1)) x sd / sqrt(n); "
        "*seeds needed* solves the same formula for the observed difference (better/worse) "
        "and, for equivalence, (t(1 - a, n - 1) + t(power, n - 1)) x sd / sqrt(n) <= margin - "
        f"|difference| (- where it can never be reached, or needs more than {MAX_SEEDS}). "
        "*bootstrap p* is sacreBLEU's paired bootstrap resampling of each seed pair's test "
        f"sentences (`sacrebleu --paired-bs`, {report.resamples} resamples): whether that one "
        "pair of runs differs beyond the choice of test sentences; it says nothing about seeds."
    )
    if report.bootstrap_signature:
        text += f"\n\nBootstrap signature: `{report.bootstrap_signature}`"
    return text


def verdict_tables(report: Report) -> str:
    sections = []
    for family in [f for f in report.families if f.comparisons]:
        where = f", {family.protocol.title}" if family.protocol.name else ""
        sections.append(
            f"### {family.question.key}{where}: {_family_size(family, ' comparisons')}\n\n"
            f"{family.question.title}\n\n" + verdict_table(family)
        )
    return "\n\n".join(sections) or "No declared comparison has runs of both sides yet."


def verdict_table(family: Family) -> str:
    header = [
        "configuration",
        "against",
        "test set",
        "seeds",
        "difference",
        "95% CI",
        "p",
        "Holm p",
        "TOST Holm p",
        "detectable",
        "seeds needed",
        "bootstrap p per seed",
        "verdict",
    ]
    cells = []
    for c in family.comparisons:
        d, v = c.difference, c.verdict
        bootstrap = ", ".join(f"{s}: {p:.3f}" for s, p in c.bootstrap.items()) or "-"
        why = f" ({v.reason})" if v.reason else ""
        cells.append(
            [
                c.system.slug,
                c.reference.slug,
                c.test_set,
                f"{d.seeds} ({' '.join(map(str, c.seeds))})",
                f"{d.mean:+.2f}",
                interval_cell(d.ci95),
                p_cell(d.p_value),
                p_cell(v.holm_p),
                p_cell(v.holm_tost_p),
                number(v.detectable),
                f"{_needed(v.seeds_for_difference)} / {_needed(v.seeds_for_equivalence)}",
                bootstrap,
                f"**{v.verdict}**{why}",
            ]
        )
    return markdown_table(header, cells)


def _needed(seeds: int | None) -> str:
    return "-" if seeds is None else str(seeds)
