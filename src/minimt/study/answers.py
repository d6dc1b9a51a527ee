"""The report's answers: one paragraph per question and protocol (the answer, with the
comparisons it rests on), then the verdict rules and one verdict table per question."""

from __future__ import annotations

from collections.abc import Sequence

from minimt.study.compare import Comparison, Family
from minimt.study.questions import planned_alpha
from minimt.study.results import Report
from minimt.study.runs import LONG_PREFIX
from minimt.study.tables import interval_cell, markdown_table, number, p_cell, stopped_by
from minimt.study.verdicts import MAX_SEEDS, NONZERO, NOT_AFTER_HOLM

CAPS = ("max_steps", "max_minutes", "max_epochs")  # stop reasons that are caps, not convergence

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
    if family.exploratory:
        context.append(f"exploratory ({family.exploratory})")
    parts = []
    for verdict, phrase in PHRASES.items():
        found = [c for c in family.comparisons if c.verdict.verdict == verdict]
        if found:
            phrase = phrase.replace("equivalent", f"equivalent (±{margin:g} BLEU)")
            parts.append(f"{phrase.capitalize()}: {_cite(found)}.")
    missing = ", ".join(f"{name(c.system)} vs {name(c.reference)}" for c in family.not_run)
    if missing:
        parts.append(f"Not run yet: {missing}.")
    parts.append(_caps(family))
    return f"{_title(family, context)} " + " ".join(parts)


def _caps(family: Family) -> str:
    """How many of the runs a family rests on stopped at a cap rather than by patience."""
    runs = family.runs
    capped: dict[str, int] = {}
    for run in runs:
        if (reason := stopped_by(run.metrics)) in CAPS:
            capped[reason] = capped.get(reason, 0) + 1
    if not capped:
        return f"None of the {len(runs)} runs this family rests on stopped at a cap."
    (cap, count), *others = sorted(capped.items())
    more = "".join(f" and {n} at trainer.{other}" for other, n in others)
    return (
        f"{count} of the {len(runs)} runs this family rests on stopped at trainer.{cap}{more}, "
        "not by patience."
    )


def _title(family: Family, context: Sequence[str]) -> str:
    title = f"**{family.question.key}. {family.question.title}**"
    return f"{title} ({'; '.join(context)})" if context else title


def _family_size(family: Family, unit: str = "") -> str:
    if not family.size:
        return "no comparison with 2 seeds yet, so no test"
    size = f"Holm over {family.size}{unit} at {family.alpha:g}"
    planned = planned_alpha(family.protocol.name, family.question.key)
    return size + (" (the plan's share per look)" if planned == family.alpha else "")


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
        differences = " / ".join(
            f"{c.difference.mean:+.2f}" + (f" ({NONZERO})" if c.verdict.reason == NONZERO else "")
            for c in found
        )
        sets = [c.test_set for c in found if c.test_set.startswith(LONG_PREFIX)]
        on = f" ({' / '.join(sets)})" if sets else ""
        entries.append(f"{system} vs {reference} {differences}{on}")
    return "; ".join(entries)


def verdict_rules(report: Report) -> str:
    r = report.rules
    tested = [f for f in report.families if f.size]
    text = (
        "Each question declares its comparisons (`minimt.study.questions`); they are made "
        "within one protocol, never across. Seed s of one side is paired with seed s of the "
        "other; *difference* is the mean over the paired seeds of test BLEU (configuration minus "
        "the one it is compared against), with its **unadjusted 95% CI** (Student t, n - 1 "
        "degrees of freedom: the row's own interval, not adjusted for the family, so one that "
        "excludes 0 is not a verdict) and the two-sided paired t-test's p. "
        "**Holm's correction runs within each question** (its family: the comparisons with a "
        "p-value in one protocol; the size and the family's alpha are in each table's heading), "
        f"at {r.alpha:g}{_planned_shares(tested, r.alpha)}. Each claim type (differences; "
        "equivalence) is held at the family's alpha separately: they are two Holm chains, so a "
        "family's chance of any false claim of either kind can reach twice its alpha."
        "\n\n**better / worse**: Holm p < alpha. **equivalent**: the two one-sided t-tests "
        f"reject a difference of ±{r.margin:g} BLEU or more, Holm-adjusted within the family too "
        "(TOST Holm p < alpha); a difference shown both ways is *equivalent within "
        f"±{r.margin:g}, {NONZERO}*, not better or worse: inside the margin it is not one to "
        "claim as mattering. **inconclusive**: neither, with the reason: *too few seeds* or, "
        f"inside ±{r.margin:g}, *{NOT_AFTER_HOLM}*; both say how many seeds a verdict would need."
        "\n\n*detectable* is the smallest true difference the row's seeds detect with "
        f"{r.power:.0%} power at alpha / family size (Holm's first step, so conservative), from "
        "the exact power of the two-sided paired t-test (noncentral t) and the family's pooled "
        "seed spread of the paired differences. *seeds needed*, for better/worse: about N seeds "
        f"for {r.power:.0%} power if the true difference equals the observed one, at this "
        "family's size (the same exact power; optimistic where the observed difference of a few "
        "seeds overstates the true one); for equivalence the t-quantile approximation "
        "(t(1 - a, n - 1) + t(power, n - 1)) x sd / sqrt(n) <= margin - |difference| (- where it "
        f"can never be reached, or needs more than {MAX_SEEDS}). Each answer says how many of "
        "the runs it rests on stopped at a cap (trainer.max_steps, max_minutes or max_epochs in "
        "metrics.json stop_reason) rather than by patience: their scores are what the cap left."
        "\n\n*bootstrap p* is sacreBLEU's paired bootstrap resampling of each seed pair's test "
        f"sentences (`sacrebleu --paired-bs`, {report.resamples} resamples): whether that one "
        "pair of runs differs beyond the choice of test sentences; it says nothing about seeds."
    )
    exploratory = {f.protocol.title: f.exploratory for f in tested if f.exploratory}
    if exploratory:
        marked = "; ".join(f"{title} ({why})" for title, why in exploratory.items())
        text += (
            f"\n\n**Exploratory**: {marked}. Its families and the ±{r.margin:g} margin were "
            "written after its runs had been analysed under an earlier plan, so its verdicts are "
            "exploratory until new seeds, under a plan written first, confirm them."
        )
    if report.bootstrap_signature:
        text += f"\n\nBootstrap signature: `{report.bootstrap_signature}`"
    return text


def _planned_shares(families: Sequence[Family], alpha: float) -> str:
    """', or the smaller alpha the study's plan spends per look: Q1 and Q2 of <protocol> at
    0.025' ("" when every family is at the report's alpha)."""
    shares: dict[tuple[str, float], list[str]] = {}
    for f in families:
        if f.alpha != alpha:
            shares.setdefault((f.protocol.title, f.alpha), []).append(f.question.key)
    if not shares:
        return ""
    listed = "; ".join(
        f"{' and '.join(keys)} of {title} at {share:g}" for (title, share), keys in shares.items()
    )
    return f", or the smaller alpha the study's plan spends per look (`questions.PLAN`): {listed}"


def verdict_tables(report: Report) -> str:
    sections = []
    for family in [f for f in report.families if f.comparisons]:
        where = f", {family.protocol.title}" if family.protocol.name else ""
        marked = f"; exploratory ({family.exploratory})" if family.exploratory else ""
        sections.append(
            f"### {family.question.key}{where}: {_family_size(family, ' comparisons')}{marked}"
            f"\n\n{family.question.title}\n\n" + verdict_table(family)
        )
    return "\n\n".join(sections) or "No declared comparison has runs of both sides yet."


def verdict_table(family: Family) -> str:
    header = [
        "configuration",
        "against",
        "test set",
        "seeds",
        "difference",
        "unadjusted 95% CI",
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
