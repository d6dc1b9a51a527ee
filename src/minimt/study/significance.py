"""Seed-paired statistics and the verdicts built on them: Student t intervals and tests, Holm's
correction, equivalence (two one-sided tests against a margin), the exact power of the paired
t-test (noncentral t), the rules in words; and sacreBLEU's paired bootstrap of one pair of runs,
with the hypotheses and references it resamples."""

from __future__ import annotations

import json
import logging
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from sacrebleu.metrics import BLEU
from sacrebleu.significance import PairedTest
from scipy import optimize, stats

from minimt.data.corpus import MULTI30K_URL, DataError, Pairs
from minimt.data.splits import load_held_out
from minimt.study.runs import Run

log = logging.getLogger(__name__)

MAX_SEEDS = 200  # seeds needed beyond this are reported as "more than MAX_SEEDS"
NONZERO = "with a small non-zero difference"  # the reason of an equivalence also shown non-zero
NOT_AFTER_HOLM = "unadjusted CI excludes 0; not significant after Holm"


def mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def mean_std(values: Sequence[float]) -> tuple[float | None, float | None]:
    """Mean and sample standard deviation (n - 1); None where there are too few values."""
    return mean(values), statistics.stdev(values) if len(values) > 1 else None


@dataclass(frozen=True)
class PairedDifference:
    """System minus baseline over seeds paired by trainer.seed; intervals are (low, high)."""

    seeds: int  # with fewer than 2 there is no interval and no p-value
    mean: float
    sd: float | None  # sample standard deviation (n - 1)
    ci95: tuple[float, float] | None  # Student t, n - 1 degrees of freedom
    ci90: tuple[float, float] | None  # the interval of the two one-sided tests
    p_value: float | None  # two-sided paired t-test of mean difference = 0


def t_interval(differences: Sequence[float], level: float) -> tuple[float, float]:
    """The `level` confidence interval of the mean: mean +- t_{(1+level)/2, n-1} sd / sqrt(n)."""
    n = len(differences)
    half = float(stats.t.ppf((1 + level) / 2, n - 1)) * statistics.stdev(differences) / math.sqrt(n)
    mean = statistics.fmean(differences)
    return mean - half, mean + half


def paired_difference(baseline: Sequence[float], system: Sequence[float]) -> PairedDifference:
    """The difference, system minus baseline, of two score lists aligned by seed."""
    if len(baseline) != len(system) or not baseline:
        raise ValueError(
            f"{len(baseline)} baseline and {len(system)} system scores: give one pair per seed"
        )
    differences = [s - b for b, s in zip(baseline, system, strict=True)]
    n = len(differences)
    if n < 2:
        return PairedDifference(1, differences[0], None, None, None, None)
    mean, sd = statistics.fmean(differences), statistics.stdev(differences)
    if sd == 0:  # t = mean / (sd / sqrt(n)) is 0 (all zero) or infinite
        p_value = 1.0 if mean == 0 else 0.0
    else:
        p_value = float(2 * stats.t.sf(abs(mean / (sd / math.sqrt(n))), n - 1))
    intervals = t_interval(differences, 0.95), t_interval(differences, 0.90)
    return PairedDifference(n, mean, sd, *intervals, p_value)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the input order."""
    adjusted, running = [0.0] * len(p_values), 0.0
    for rank, i in enumerate(sorted(range(len(p_values)), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (len(p_values) - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


@dataclass(frozen=True)
class PairedResult:
    baseline_bleu: float
    system_bleu: float
    p_value: float
    signature: str  # the BLEU signature with the test's settings (bs:N, seed)


def paired_bootstrap(
    baseline: Sequence[str], system: Sequence[str], refs: Sequence[str], resamples: int = 1000
) -> PairedResult:
    """`sacrebleu --paired-bs` (Koehn 2004): the p of the BLEU difference of two systems'
    hypotheses, from `resamples` resamples drawn with sacreBLEU's fixed seed."""
    if not len(baseline) == len(system) == len(refs):
        raise ValueError(
            f"{len(baseline)} baseline and {len(system)} system hypotheses for {len(refs)} "
            "references: they must align"
        )
    systems = [("baseline", list(baseline)), ("system", list(system))]
    test = PairedTest(systems, {"BLEU": BLEU()}, [list(refs)], "bs", n_samples=resamples)
    signatures, scores = test()
    base, result = scores["BLEU"]
    # Identical hypotheses make every resampled difference 0, which sacreBLEU's strict "greater
    # than observed" never counts (p = 1/(resamples+1)): no resample can differ by less, so p = 1.
    p_value = 1.0 if list(baseline) == list(system) else result.p_value
    return PairedResult(base.score, result.score, p_value, signatures["BLEU"].format())


def read_test_pairs(data: DictConfig, name: str) -> Pairs:
    """(sources, references) of one of a run's test sets: the one place the report reads
    references. Multi30k is read from this machine's location (MINIMT_DATA_URL, else the official
    one): its pinned SHA-256 sums make it the same data wherever the run read it."""
    if data.name == "multi30k":
        here = {"url": os.environ.get("MINIMT_DATA_URL", MULTI30K_URL), "dir": "data/multi30k"}
        data = OmegaConf.merge(data, here)
    return load_held_out(data, [name])[name]


class Translations:
    """Each run's hypotheses of a test set with the (sources, references) they translate, read
    once per run (the pairs once per data config)."""

    def __init__(self):
        self.pairs: dict[tuple[str, str], Pairs | None] = {}
        self.found: dict[tuple[Path, str], tuple[list[str], Pairs] | None] = {}
        self.unread: dict[str, str] = {}  # test set -> why its references could not be read

    def of(self, run: Run, test_set: str) -> tuple[list[str], Pairs] | None:
        """(hypotheses, pairs); None (with a warning) when either is missing or they misalign."""
        if (run.dir, test_set) not in self.found:
            self.found[run.dir, test_set] = self.read(run, test_set)
        return self.found[run.dir, test_set]

    def read(self, run: Run, test_set: str) -> tuple[list[str], Pairs] | None:
        hyps, pairs = run.hyps(test_set), self.pairs_of(run.config.data, test_set)
        if hyps is None or pairs is None:
            log.warning("%s: no hyps.%s.txt or no %s data", run.dir, test_set, test_set)
            return None
        if len(hyps) != len(pairs[0]):
            n = len(pairs[0])
            log.warning("%s: %d hypotheses for %d %s sentences", run.dir, len(hyps), n, test_set)
            return None
        return hyps, pairs

    def bootstrap(
        self, reference: Run, system: Run, test_set: str, resamples: int
    ) -> PairedResult | None:
        """paired_bootstrap of two runs' hypotheses; None when either cannot be read (warned of)
        or they translate different pairs."""
        theirs, mine = self.of(reference, test_set), self.of(system, test_set)
        if theirs is None or mine is None:
            return None
        if theirs[1] != mine[1]:
            log.warning(
                "%s, %s: different %s pairs, no bootstrap", reference.dir, system.dir, test_set
            )
            return None
        return paired_bootstrap(theirs[0], mine[0], mine[1][1], resamples)

    def pairs_of(self, data: DictConfig, test_set: str) -> Pairs | None:
        key = (json.dumps(OmegaConf.to_container(data, resolve=True), sort_keys=True), test_set)
        if key not in self.pairs:
            try:
                self.pairs[key] = read_test_pairs(data, test_set)
            except (DataError, KeyError) as error:
                log.warning("cannot read the %s pairs: %s", test_set, error)
                self.unread.setdefault(test_set, str(error).splitlines()[0])
                self.pairs[key] = None
        return self.pairs[key]


@dataclass(frozen=True)
class Rules:
    """The verdict protocol's settings; docs/study.md cites the margin's source."""

    alpha: float = 0.05  # error rate of one question's family, for each claim type separately
    margin: float = 1.0  # BLEU: differences inside +-margin are called equivalent when shown to be
    power: float = 0.8  # of the detectable differences and the seeds needed


def rules_in_words(rules: Rules, resamples: int, planned: str, exploratory: str) -> str:
    """The verdict rules as report.md states them: `planned` lists the questions the study's plan
    tests at a smaller alpha, `exploratory` the protocols whose plan came after their runs ("" for
    none)."""
    spent = f", or the smaller alpha the study's plan spends per look (`questions.PLAN`): {planned}"
    text = (
        "Each question declares its comparisons (`minimt.study.questions`); they are made "
        "within one protocol, never across. Seed s of one side is paired with seed s of the "
        "other; *difference* is the mean over the paired seeds of test BLEU (configuration minus "
        "the one it is compared against), with its **unadjusted 95% CI** (Student t, n - 1 "
        "degrees of freedom: the row's own interval, not adjusted for the family, so one that "
        "excludes 0 is not a verdict) and the two-sided paired t-test's p. "
        "**Holm's correction runs within each question** (its family: the comparisons with a "
        "p-value in one protocol; the size and the family's alpha are in each table's heading), "
        f"at {rules.alpha:g}{spent if planned else ''}. Each claim type (differences; "
        "equivalence) is held at the family's alpha separately: they are two Holm chains, so a "
        "family's chance of any false claim of either kind can reach twice its alpha."
        "\n\n**better / worse**: Holm p < alpha. **equivalent**: the two one-sided t-tests "
        f"reject a difference of ±{rules.margin:g} BLEU or more, Holm-adjusted within the family "
        "too (TOST Holm p < alpha); a difference shown both ways is *equivalent within "
        f"±{rules.margin:g}, {NONZERO}*, not better or worse: inside the margin it is not one to "
        "claim as mattering. **inconclusive**: neither, with the reason: *too few seeds* or, "
        f"inside ±{rules.margin:g}, *{NOT_AFTER_HOLM}*; both say how many seeds a verdict would "
        "need.\n\n*detectable* is the smallest true difference the row's seeds detect with "
        f"{rules.power:.0%} power at alpha / family size (Holm's first step, so conservative), "
        "from the exact power of the two-sided paired t-test (noncentral t) and the family's "
        "pooled seed spread of the paired differences. *seeds needed*, for better/worse: about N "
        f"seeds for {rules.power:.0%} power if the true difference equals the observed one, at "
        "this family's size (the same exact power; optimistic where the observed difference of a "
        "few seeds overstates the true one); for equivalence the t-quantile approximation "
        "(t(1 - a, n - 1) + t(power, n - 1)) x sd / sqrt(n) <= margin - |difference| (- where it "
        f"can never be reached, or needs more than {MAX_SEEDS}). Each answer says how many of "
        "the runs it rests on stopped at a cap (trainer.max_steps, max_minutes or max_epochs in "
        "metrics.json stop_reason) rather than by patience: their scores are what the cap left."
        "\n\n*bootstrap p* is sacreBLEU's paired bootstrap resampling of each seed pair's test "
        f"sentences (`sacrebleu --paired-bs`, {resamples} resamples): whether that one "
        "pair of runs differs beyond the choice of test sentences; it says nothing about seeds."
    )
    if exploratory:
        text += (
            f"\n\n**Exploratory**: {exploratory}. Its families and the ±{rules.margin:g} margin "
            "were written after its runs had been analysed under an earlier plan, so its verdicts "
            "are exploratory until new seeds, under a plan written first, confirm them."
        )
    return text


@dataclass(frozen=True)
class Verdict:
    verdict: str  # better | worse | equivalent | inconclusive
    holm_p: float | None  # difference = 0, Holm-adjusted within the family
    holm_tost_p: float | None  # |difference| >= margin, Holm-adjusted within the family
    detectable: float | None  # smallest |difference| these seeds detect (power, alpha / family)
    seeds_for_difference: int | None  # to detect the observed difference; None: never
    seeds_for_equivalence: int | None  # to show equivalence at the observed difference
    reason: str  # why inconclusive; for equivalent, NONZERO when also shown non-zero; else ""


def tost_p_value(difference: PairedDifference, margin: float) -> float:
    """p of the two one-sided t-tests of |mean difference| >= margin (without spread: 0 or 1)."""
    n, mean, sd = difference.seeds, difference.mean, difference.sd
    if sd == 0:
        return 0.0 if abs(mean) < margin else 1.0
    se = sd / math.sqrt(n)
    above_lower = float(stats.t.sf((mean + margin) / se, n - 1))
    return max(above_lower, float(stats.t.cdf((mean - margin) / se, n - 1)))


def pooled_sd(differences: Sequence[PairedDifference]) -> float | None:
    """The comparisons' seed spread pooled by degrees of freedom; None without 2+ seeds."""
    tested = [d for d in differences if d.seeds > 1]
    dof = sum(d.seeds - 1 for d in tested)
    return math.sqrt(sum((d.seeds - 1) * d.sd**2 for d in tested) / dof) if dof else None


def power_of_difference(difference: float, sd: float, seeds: int, alpha: float) -> float:
    """Exact power of the two-sided paired t-test at `alpha` from `seeds` pairs of spread `sd`
    when the true mean difference is `difference`: P(|T| > t_{1-alpha/2, n-1}) with T noncentral
    t (n - 1 degrees of freedom, noncentrality difference sqrt(n) / sd)."""
    dof, noncentrality = seeds - 1, abs(difference) * math.sqrt(seeds) / sd
    critical = float(stats.t.ppf(1 - alpha / 2, dof))
    upper = float(stats.nct.sf(critical, dof, noncentrality))
    lower = float(stats.nct.cdf(-critical, dof, noncentrality))
    # Far in the tails scipy's noncentral t can return nan: there the rejection on the side of
    # the difference is certain and the one on the other side is negligible.
    if not math.isfinite(upper):
        upper = 1.0 if noncentrality > critical else 0.0
    return min(1.0, upper + (lower if math.isfinite(lower) else 0.0))


def detectable_difference(sd: float, seeds: int, alpha: float, power: float) -> float:
    """The smallest true difference the test at `alpha` detects with `power`."""

    def short(effect: float) -> float:  # in units of sd
        return power_of_difference(effect, 1.0, seeds, alpha) - power

    high = 1.0
    while short(high) < 0:
        high *= 2
    return float(optimize.brentq(short, 0.0, high, xtol=1e-12)) * sd


def seeds_for_difference(sd: float, difference: float, alpha: float, power: float) -> int | None:
    """The fewest seeds with `power` at a true `difference` (None for 0 or above MAX_SEEDS)."""
    if difference == 0:
        return None
    return fewest_seeds(lambda n: power_of_difference(difference, sd, n, alpha) >= power)


def seeds_for_equivalence(
    sd: float, difference: float, margin: float, alpha: float, power: float
) -> int | None:
    """The fewest seeds that show equivalence at a true `difference` (None on or outside the
    margin, or above MAX_SEEDS): (t_{1-alpha, n-1} + t_{power, n-1}) sd / sqrt(n) <= room."""
    room = margin - abs(difference)

    def reach(n: int) -> float:  # how far inside the margin the difference must lie
        return float(
            (stats.t.ppf(1 - alpha, n - 1) + stats.t.ppf(power, n - 1)) * sd / math.sqrt(n)
        )

    return fewest_seeds(lambda n: reach(n) <= room) if room > 0 else None


def fewest_seeds(enough: Callable[[int], bool]) -> int | None:
    return next((n for n in range(2, MAX_SEEDS + 1) if enough(n)), None)


def family_verdicts(differences: Sequence[PairedDifference], rules: Rules) -> list[Verdict]:
    """The verdict of every comparison of one family, in the input order: better / worse at Holm
    p < alpha, equivalent at TOST Holm p < alpha (NONZERO when shown both ways); detectable
    differences and seeds needed at the pooled spread and alpha / family size."""
    tested = [i for i, d in enumerate(differences) if d.p_value is not None]
    holm_p = dict(zip(tested, holm([differences[i].p_value for i in tested]), strict=True))
    tost = [tost_p_value(differences[i], rules.margin) for i in tested]
    holm_tost = dict(zip(tested, holm(tost), strict=True))
    sd = pooled_sd(differences)
    level = rules.alpha / max(len(tested), 1)
    return [
        verdict_of(d, holm_p.get(i), holm_tost.get(i), sd, level, rules)
        for i, d in enumerate(differences)
    ]


def verdict_of(
    d: PairedDifference,
    holm_p: float | None,
    holm_tost_p: float | None,
    sd: float | None,
    level: float,
    rules: Rules,
) -> Verdict:
    if holm_p is None or sd is None:
        return Verdict("inconclusive", None, None, None, None, None, "one seed: no interval")
    if sd == 0:
        detectable, for_difference, for_equivalence = 0.0, 2, 2
    else:
        detectable = detectable_difference(sd, d.seeds, level, rules.power)
        for_difference = seeds_for_difference(sd, d.mean, level, rules.power)
        for_equivalence = seeds_for_equivalence(sd, d.mean, rules.margin, level, rules.power)
    differs, equivalent = holm_p < rules.alpha, holm_tost_p < rules.alpha
    if equivalent:
        name, reason = "equivalent", NONZERO if differs else ""
    elif differs:
        name, reason = "better" if d.mean > 0 else "worse", ""
    else:
        name, reason = "inconclusive", why_inconclusive(d, for_difference, for_equivalence, rules)
    return Verdict(name, holm_p, holm_tost_p, detectable, for_difference, for_equivalence, reason)


def why_inconclusive(
    d: PairedDifference, for_difference: int | None, for_equivalence: int | None, rules: Rules
) -> str:
    """Too few seeds for the difference measured, or, inside the margin, an unadjusted interval
    that excludes 0 where Holm's p does not; with the seeds a verdict would need."""
    needs = [f"about {for_difference} seeds for better/worse"] if for_difference else []
    if for_equivalence is not None:
        needs.append(f"{'about ' if not needs else ''}{for_equivalence} for equivalent")
    needed = (
        " or ".join(needs) + f", for {rules.power:.0%} power if the true difference equals the "
        "observed one, at this family's size"
        if needs
        else f"more than {MAX_SEEDS} seeds"
    )
    low, high = d.ci95
    if (low > 0 or high < 0) and abs(d.mean) < rules.margin:
        return f"{NOT_AFTER_HOLM} (inside ±{rules.margin:g}): {needed}"
    return f"too few seeds: {needed}"
