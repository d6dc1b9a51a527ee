"""The study's questions and the plan of experiment=study_cpu, declared before their runs, and
their answers: each question's seed-paired comparisons judged within its family, each planned look
tested once its planned seeds are in."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from minimt.data.length_split import LONG_PREFIX
from minimt.study.runs import Configuration, Protocol, Run, init_ratio
from minimt.study.significance import (
    PairedDifference,
    Rules,
    Translations,
    Verdict,
    family_verdicts,
    holm,
    paired_difference,
)

ENCODINGS_IN_RANGE = ("learned", "rope", "alibi", "none")
SPLIT_WORDS = 15  # the length split trains on sources of at most this many words


@dataclass(frozen=True)
class Contrast:
    """`system` against `reference`, seed-paired, on the headline test set or (long_buckets) on
    each long_* test set both have. Questions name configurations by their slug within a protocol
    (Configuration.local_slug), the plan names arms (configs/arm)."""

    system: str
    reference: str
    long_buckets: bool = False


@dataclass(frozen=True)
class Question:
    key: str  # Q1, Q2, ...
    title: str
    contrasts: tuple[Contrast, ...]  # one family for Holm's correction


def scaling_contrasts(pe: str) -> list[Contrast]:
    """The 2x2 of sqrt(d_model) scaling x the token table's init: each factor at each level of
    the other, and both at once (unscaled with init std 1 keeps the scaled token norm)."""
    base, unscaled, init1 = f"full-{pe}", f"full-{pe}-unscaled", f"full-{pe}-init1"
    both = f"{unscaled}-init1"
    pairs = [(unscaled, base), (init1, base), (both, base), (both, unscaled), (both, init1)]
    return [Contrast(system, reference) for system, reference in pairs]


def length_contrasts() -> list[Contrast]:
    split, control = f"length{SPLIT_WORDS}", f"control{SPLIT_WORDS}"
    in_split = [Contrast(f"{split}-{pe}", f"{split}-sinusoidal", True) for pe in ENCODINGS_IN_RANGE]
    encodings = ("sinusoidal", *ENCODINGS_IN_RANGE)
    return in_split + [Contrast(f"{split}-{pe}", f"{control}-{pe}", True) for pe in encodings]


QUESTIONS = (
    Question(
        "Q1",
        "Which positional encoding, in range (full data, test_2016_flickr)?",
        tuple(Contrast(f"full-{pe}", "full-sinusoidal") for pe in ENCODINGS_IN_RANGE),
    ),
    Question(
        "Q2",
        "What does sqrt(d_model) scaling do, with the token table's init?",
        tuple(c for pe in ("sinusoidal", "learned", "rope") for c in scaling_contrasts(pe)),
    ),
    Question(
        "Q3",
        "How far should the tables be tied?",
        tuple(
            Contrast(f"full-sinusoidal-share_{s}", "full-sinusoidal") for s in ("decoder", "none")
        ),
    ),
    Question(
        "Q4",
        "Where do positions matter: encoder, decoder or both?",
        tuple(
            Contrast(f"full-{one}", "full-sinusoidal")
            for one in ("enc_sinusoidal-dec_none", "enc_none-dec_sinusoidal")
        ),
    ),
    Question(
        "Q5",
        f"Which encoding generalises to sentences longer than it trained on (<= {SPLIT_WORDS} "
        "words), and is the loss length or data size?",
        tuple(length_contrasts()),
    ),
)


@dataclass(frozen=True)
class Interaction:
    """Does a change act the same in two settings: per seed, (first.system - first.reference)
    minus (second.system - second.reference), tested against 0."""

    first: Contrast
    second: Contrast


@dataclass(frozen=True)
class PlannedTest:
    comparison: Contrast | Interaction
    seeds: tuple[int, ...]

    @property
    def contrasts(self) -> tuple[Contrast, ...]:
        c = self.comparison
        return (c.first, c.second) if isinstance(c, Interaction) else (c,)

    def describe(self) -> str:
        if isinstance(self.comparison, Interaction):
            return " - ".join(f"({c.system} - {c.reference})" for c in self.contrasts)
        return f"{self.comparison.system} vs {self.comparison.reference}"


@dataclass(frozen=True)
class Look:
    """One family tested once: a question's tests at one look, Holm over all of them at alpha."""

    question: str
    look: int
    alpha: float
    tests: tuple[PlannedTest, ...]


def planned(seeds: tuple[int, ...], *contrasts: str) -> tuple[PlannedTest, ...]:
    """A PlannedTest on `seeds` of each "system vs reference"."""
    return tuple(PlannedTest(Contrast(*c.split(" vs ")), seeds) for c in contrasts)


# The plan for experiment=study_cpu from its second round on, fixed before its runs; it names arms,
# which a run records in metrics.json "choices". Each Look is one family: Holm's m is the number
# of tests listed, whatever has run. The family-wise 0.05 of Q1 and Q2 is split over two looks
# (0.025 each); Q2x and Q6 are new families with one look each at 0.05. Seeds per test come from
# the protocol's pooled seed spread (paired-difference sd 0.92 BLEU at seeds 1-3), for 80% power
# at the observed difference.
PLAN_PROTOCOL = "study_cpu"
FIRST_SEEDS, NEW_SEEDS, Q6_SEEDS = (1, 2, 3), (4, 5, 6, 7, 8), (1, 2, 3, 4, 5)
UNSCALED_MINUS_SCALED = Interaction(
    Contrast("unscaled_learned", "full_learned"), Contrast("unscaled_sinusoidal", "full_sinusoidal")
)
Q6_ARMS = ("fairseq_learned", "sinusoid_rms_learned", "unscaled_small_sinusoidal")
PLAN = (
    # Look 1 (done): the comparisons that had run at seeds 1-3, restated at 0.025.
    Look(
        "Q1",
        1,
        0.025,
        planned(FIRST_SEEDS, "full_learned vs full_sinusoidal", "full_rope vs full_sinusoidal"),
    ),
    Look(
        "Q2",
        1,
        0.025,
        planned(
            FIRST_SEEDS,
            "unscaled_sinusoidal vs full_sinusoidal",
            "init1_sinusoidal vs full_sinusoidal",
            "unscaled_init1_sinusoidal vs full_sinusoidal",
            "unscaled_init1_sinusoidal vs unscaled_sinusoidal",
            "unscaled_init1_sinusoidal vs init1_sinusoidal",
            "unscaled_learned vs full_learned",
            "unscaled_rope vs full_rope",
        ),
    ),
    # Look 2: what look 1 left open and new seeds can settle. Q1 has nothing left to test there
    # (learned was called at look 1; rope gets no new seeds, it needs about 7).
    Look(
        "Q2",
        2,
        0.025,
        planned(
            (*FIRST_SEEDS, *NEW_SEEDS),
            "unscaled_sinusoidal vs full_sinusoidal",
            "unscaled_learned vs full_learned",
        )
        + planned(Q6_SEEDS, "unscaled_init1_sinusoidal vs full_sinusoidal"),
    ),
    # The interaction seeds 1-3 suggested, tested on new seeds only.
    Look("Q2x", 1, 0.05, (PlannedTest(UNSCALED_MINUS_SCALED, NEW_SEEDS),)),
    # Magnitude balance: each new arm against the default and against today's learned arm.
    Look(
        "Q6",
        1,
        0.05,
        planned(
            Q6_SEEDS,
            *(f"{arm} vs {ref}" for arm in Q6_ARMS for ref in ("full_sinusoidal", "full_learned")),
        ),
    ),
)
# The protocols whose families and margin were written after their runs had been analysed (the
# 48 runs of experiment=study, first under Holm over all 36 comparisons and a margin of +-0.5):
# their verdicts are exploratory until new seeds, under a plan written first, confirm them.
WRITTEN_AFTER_THE_DATA = ("study",)


def planned_alpha(protocol: str, question: str) -> float | None:
    """The alpha the plan spends on `question` per look in `protocol`; None where it has none."""
    alphas = {look.alpha for look in PLAN if look.question == question}
    return min(alphas) if protocol == PLAN_PROTOCOL and alphas else None


def exploratory(protocol: str) -> str:
    """Why a protocol's verdicts are exploratory; "" when its plan came before its runs."""
    return "plan written after the data" if protocol in WRITTEN_AFTER_THE_DATA else ""


@dataclass
class Comparison:
    """A system configuration against a reference one on one test set, seeds paired."""

    reference: Configuration
    system: Configuration
    test_set: str
    seeds: list[int]
    difference: PairedDifference  # test BLEU, system minus reference
    bootstrap: dict[int, float]  # seed -> paired bootstrap p of that seed's two runs
    runs: list[Run]  # the paired runs of both sides
    signature: str | None  # the bootstrap's; None without one
    verdict: Verdict | None = None  # set with its family's


@dataclass
class Family:
    """One question's comparisons in one protocol: what Holm's correction runs over."""

    protocol: Protocol
    question: Question
    comparisons: list[Comparison]
    not_run: list[Contrast]  # no runs of one side, or no common seed
    lacking: list[str]  # configurations without runs that a contrast with runs of the other needs
    alpha: float  # the report's, or the plan's share of it
    exploratory: str

    @property
    def size(self) -> int:
        """Holm's m: the comparisons with a p-value (2+ paired seeds)."""
        return sum(c.difference.p_value is not None for c in self.comparisons)

    @property
    def runs(self) -> list[Run]:
        """The runs its comparisons rest on, each once, in order of first use."""
        return list({id(run): run for c in self.comparisons for run in c.runs}.values())


def shared_test_sets(runs: Sequence[Run]) -> list[str]:
    """The test sets every run has, in the first run's order."""
    common = set.intersection(*(set(run.test_sets) for run in runs))
    return [name for name in runs[0].test_sets if name in common]


def contrast_test_sets(contrast: Contrast, runs: Sequence[Run], headline: str) -> list[str]:
    """The headline test set, or with long_buckets every long_* set, where all the runs have it."""
    names = shared_test_sets(runs)
    if contrast.long_buckets:
        return [name for name in names if name.startswith(LONG_PREFIX)]
    return [headline] if headline in names else []


def answer_questions(
    groups: dict[Configuration, list[Run]],
    headline: str,
    translations: Translations,
    resamples: int,
    rules: Rules,
) -> tuple[list[Family], str | None]:
    """Every question in every protocol that has runs, its comparisons judged within the family
    (at rules.alpha, or the plan's smaller share); and the bootstrap's signature."""
    by_slug = {(c.protocol, c.local_slug): runs for c, runs in groups.items()}
    families = []
    for protocol in dict.fromkeys(c.protocol for c in groups):
        for question in QUESTIONS:
            share = planned_alpha(protocol.name, question.key)
            alpha = rules.alpha if share is None else min(rules.alpha, share)
            family = Family(protocol, question, [], [], [], alpha, exploratory(protocol.name))
            for contrast in question.contrasts:
                reference = by_slug.get((protocol, contrast.reference))
                system = by_slug.get((protocol, contrast.system))
                found = []
                if reference and system:
                    for name in contrast_test_sets(contrast, reference + system, headline):
                        comparison = compare(reference, system, name, translations, resamples)
                        found += [comparison] if comparison else []
                family.comparisons += found
                family.not_run += [] if found else [contrast]
                if (reference is None) != (system is None):
                    needed = contrast.system if system is None else contrast.reference
                    family.lacking += [] if needed in family.lacking else [needed]
            differences = [c.difference for c in family.comparisons]
            verdicts = family_verdicts(differences, replace(rules, alpha=alpha))
            for comparison, verdict in zip(family.comparisons, verdicts, strict=True):
                comparison.verdict = verdict
            families.append(family)
    signatures = (c.signature for family in families for c in family.comparisons)
    return families, next((s for s in signatures if s), None)


def compare(
    reference: Sequence[Run],
    system: Sequence[Run],
    test_set: str,
    translations: Translations,
    resamples: int,
) -> Comparison | None:
    """Seed s of `system` against seed s of `reference` (None without a common seed), with a
    paired bootstrap per seed pair whose hypotheses and references can be read."""
    partners = {run.seed: run for run in reference}
    pairs = [(partners[run.seed], run) for run in system if run.seed in partners]
    if not pairs:
        return None
    bleu = [[run.scores(test_set)["bleu"] for run in side] for side in zip(*pairs, strict=True)]
    p_values, signature = {}, None
    for ref, run in pairs if resamples else []:
        if result := translations.bootstrap(ref, run, test_set, resamples):
            p_values[run.seed], signature = result.p_value, result.signature
    seeds, runs = [run.seed for _, run in pairs], [run for pair in pairs for run in pair]
    ends = reference[0].configuration, system[0].configuration
    return Comparison(*ends, test_set, seeds, paired_difference(*bleu), p_values, runs, signature)


@dataclass
class PlannedResult:
    """One planned test: the seeds in so far, its difference over them, and once its whole look
    has every planned seed, the Holm-adjusted p."""

    look: Look
    test: PlannedTest
    seeds: list[int]
    difference: PairedDifference | None
    holm_p: float | None = None

    @property
    def verdict(self) -> str:
        if self.holm_p is None:
            return f"waiting: {len(self.seeds)} of {len(self.test.seeds)} planned seeds in"
        if self.holm_p < self.look.alpha:
            return "**better**" if self.difference.mean > 0 else "**worse**"
        return "no difference shown at this look"


def plan_scores(runs: Sequence[Run]) -> dict[str, dict[int, float]]:
    """arm -> seed -> headline test BLEU of the plan protocol's runs that record their arm."""
    scores: dict[str, dict[int, float]] = {}
    for run in runs:
        arm = run.metrics.get("choices", {}).get("arm")
        if arm and run.configuration.protocol.name == PLAN_PROTOCOL:
            scores.setdefault(arm, {})[run.seed] = run.scores(run.test_sets[0])["bleu"]
    return scores


def ratio_points(runs: Sequence[Run]) -> dict[str, list[tuple[float, float]]]:
    """(init ratio, test BLEU) of each run of the plan's protocol on full data, by encoding."""
    points = defaultdict(list)
    for run in runs:
        c = run.configuration
        if c.protocol.name == PLAN_PROTOCOL and c.regime.slug == "full":
            if (ratio := init_ratio(run)) is not None:
                points[c.embedding.pe].append((ratio, run.scores(run.test_sets[0])["bleu"]))
    return points


def answer_plan(runs: Sequence[Run]) -> list[PlannedResult]:
    """Every planned test with what has run; a look's family is tested, Holm over all its tests,
    once every test has all its planned seeds. An interaction's reference is the per-seed change
    of its second setting, its system that of its first."""
    scores, results = plan_scores(runs), []
    for look in PLAN:
        family = []
        for test in look.tests:
            arms = [arm for c in test.contrasts for arm in (c.system, c.reference)]
            seeds = [s for s in test.seeds if all(s in scores.get(arm, {}) for arm in arms)]
            if isinstance(test.comparison, Interaction):
                first, second = (
                    [scores[c.system][s] - scores[c.reference][s] for s in seeds]
                    for c in test.contrasts
                )
                sides = second, first
            else:
                sides = [[scores[arm][s] for s in seeds] for arm in arms[::-1]]
            family.append(
                PlannedResult(look, test, seeds, paired_difference(*sides) if seeds else None)
            )
        if all(len(r.seeds) == len(r.test.seeds) for r in family):
            for result, p in zip(family, holm([r.difference.p_value for r in family]), strict=True):
                result.holm_p = p
        results += family
    return results
