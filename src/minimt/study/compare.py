"""The study's questions answered from its runs: each declared comparison, seed-paired test BLEU
on its test sets, its verdict within its question's family, and sacreBLEU's paired bootstrap per
seed pair, with the references read from each run's data config."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.data.corpus import MULTI30K_URL, DataError, Pairs
from minimt.data.splits import load_held_out
from minimt.study.protocol import Protocol
from minimt.study.questions import QUESTIONS, Contrast, Question, exploratory, planned_alpha
from minimt.study.runs import LONG_PREFIX, Configuration, Run
from minimt.study.significance import PairedDifference, paired_bootstrap, paired_difference
from minimt.study.verdicts import Rules, Verdict, family_verdicts

log = logging.getLogger(__name__)


def read_test_pairs(data: DictConfig, name: str) -> Pairs:
    """(sources, references) of one of a run's test sets, long_* buckets included: the one
    place the report reads references.

    Multi30k is read from this machine's location (MINIMT_DATA_URL, else the official one, cached
    in data/multi30k), not from where the run read it: its pinned SHA-256 sums make it the same
    data, and runs copied from another machine (docs/study/runs) stay reportable.
    """
    if data.name == "multi30k":
        here = {"url": os.environ.get("MINIMT_DATA_URL", MULTI30K_URL), "dir": "data/multi30k"}
        data = OmegaConf.merge(data, here)
    return load_held_out(data, [name])[name]


class Translations:
    """Each run's saved hypotheses of a test set with the (sources, references) they translate.

    The test pairs come from the run's own data config (cached under data.dir, so offline),
    read once per distinct data config and test set.
    """

    def __init__(self):
        self._pairs: dict[tuple[str, str], Pairs | None] = {}
        self._found: dict[tuple[Path, str], tuple[list[str], Pairs] | None] = {}
        self.unread: dict[str, str] = {}  # test set -> why its references could not be read

    def of(self, run: Run, test_set: str) -> tuple[list[str], Pairs] | None:
        """(hypotheses, test pairs), or None (with a warning) when either is missing or they
        do not align; read once per run and test set."""
        key = (run.dir, test_set)
        if key not in self._found:
            self._found[key] = self._read(run, test_set)
        return self._found[key]

    def _read(self, run: Run, test_set: str) -> tuple[list[str], Pairs] | None:
        hyps, pairs = run.hyps(test_set), self._pairs_for(run.config.data, test_set)
        if hyps is None or pairs is None:
            log.warning("%s: no hyps.%s.txt or no %s data", run.dir, test_set, test_set)
            return None
        if len(hyps) != len(pairs[0]):
            log.warning(
                "%s: %d hypotheses for %d %s sentences", run.dir, len(hyps), len(pairs[0]), test_set
            )
            return None
        return hyps, pairs

    def _pairs_for(self, data: DictConfig, test_set: str) -> Pairs | None:
        key = (json.dumps(OmegaConf.to_container(data, resolve=True), sort_keys=True), test_set)
        if key not in self._pairs:
            try:
                self._pairs[key] = read_test_pairs(data, test_set)
            except (DataError, KeyError) as error:
                log.warning("cannot read the %s pairs: %s", test_set, error)
                self.unread.setdefault(test_set, str(error).splitlines()[0])
                self._pairs[key] = None
        return self._pairs[key]


@dataclass
class Comparison:
    """A system configuration against a reference one on one test set, seeds paired."""

    reference: Configuration
    system: Configuration
    test_set: str
    seeds: list[int]  # the paired seeds
    difference: PairedDifference  # test BLEU, system minus reference
    bootstrap: dict[int, float]  # seed -> paired bootstrap p of that seed's two runs
    runs: list[Run]  # the paired runs of both sides: what the comparison rests on
    verdict: Verdict | None = None  # set with its family's


@dataclass
class Family:
    """One question's comparisons in one protocol: the family Holm's correction runs over."""

    protocol: Protocol
    question: Question
    comparisons: list[Comparison]
    not_run: list[Contrast]  # declared contrasts with no runs of one side (or no common seed)
    lacking: list[str]  # configurations without runs that a contrast with runs of the other needs
    alpha: float  # the family's error rate per claim type: the report's, or a plan's share of it
    exploratory: str  # why its verdicts are exploratory ("" when the plan came first)

    @property
    def size(self) -> int:
        """The comparisons with a p-value (2+ paired seeds): Holm's m."""
        return sum(c.difference.p_value is not None for c in self.comparisons)

    @property
    def runs(self) -> list[Run]:
        """The runs its comparisons rest on, each once, in order of first use."""
        found = {id(run): run for c in self.comparisons for run in c.runs}
        return list(found.values())


def shared_test_sets(runs: Sequence[Run]) -> list[str]:
    """The test sets every run has, in the first run's order."""
    common = set.intersection(*(set(run.test_sets) for run in runs))
    return [name for name in runs[0].test_sets if name in common]


def contrast_test_sets(contrast: Contrast, runs: Sequence[Run], headline: str) -> list[str]:
    """The headline test set, or with long_buckets every long_* set both sides have."""
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
    """Every declared question in every protocol that has runs, with the verdicts of its
    comparisons within their family (none where no comparison has runs of both sides); and the
    bootstrap's signature. A family's alpha is the report's (rules.alpha), or where the study's
    plan fixes a smaller one for the question in that protocol (a share of the family-wise rate
    spent at one look), the plan's."""
    by_slug = {(c.protocol, c.local_slug): c for c in groups}
    families, signature = [], None
    for protocol in dict.fromkeys(c.protocol for c in groups):
        for question in QUESTIONS:
            planned = planned_alpha(protocol.name, question.key)
            alpha = rules.alpha if planned is None else min(rules.alpha, planned)
            family = Family(protocol, question, [], [], [], alpha, exploratory(protocol.name))
            for contrast in question.contrasts:
                system = by_slug.get((protocol, contrast.system))
                reference = by_slug.get((protocol, contrast.reference))
                found = []
                if system is not None and reference is not None:
                    both = groups[reference] + groups[system]
                    for name in contrast_test_sets(contrast, both, headline):
                        comparison, bootstrapped = compare(
                            groups[reference], groups[system], name, translations, resamples
                        )
                        if comparison is not None:
                            found.append(comparison)
                            signature = signature or bootstrapped
                family.comparisons += found
                if not found:
                    family.not_run.append(contrast)
                if (system is None) != (reference is None):
                    needed = contrast.system if system is None else contrast.reference
                    family.lacking += [needed] if needed not in family.lacking else []
            differences = [c.difference for c in family.comparisons]
            verdicts = family_verdicts(differences, replace(rules, alpha=family.alpha))
            for comparison, verdict in zip(family.comparisons, verdicts, strict=True):
                comparison.verdict = verdict
            families.append(family)
    return families, signature


def compare(
    reference: Sequence[Run],
    system: Sequence[Run],
    test_set: str,
    translations: Translations,
    resamples: int,
) -> tuple[Comparison | None, str | None]:
    """Seed s of `system` against seed s of `reference` (None without a common seed): the
    difference of test BLEU over seeds and a paired bootstrap per seed pair; also the
    bootstrap's signature."""
    partners = {run.seed: run for run in reference}
    pairs = [(partners[run.seed], run) for run in system if run.seed in partners]
    if not pairs:
        return None, None
    difference = paired_difference(
        [ref.metrics["test"][test_set]["bleu"] for ref, _ in pairs],
        [run.metrics["test"][test_set]["bleu"] for _, run in pairs],
    )
    bootstrap, signature = bootstrap_per_seed(pairs, test_set, translations, resamples)
    seeds = [run.seed for _, run in pairs]
    runs = [run for pair in pairs for run in pair]
    comparison = Comparison(
        reference[0].configuration,
        system[0].configuration,
        test_set,
        seeds,
        difference,
        bootstrap,
        runs,
    )
    return comparison, signature


def bootstrap_per_seed(
    pairs: Sequence[tuple[Run, Run]], test_set: str, translations: Translations, resamples: int
) -> tuple[dict[int, float], str | None]:
    """seed -> paired bootstrap p of each (reference, system) pair of runs whose hypotheses and
    references can be read (none when resamples is 0), and the test's signature."""
    p_values, signature = {}, None
    for ref, run in pairs if resamples else []:
        theirs, mine = translations.of(ref, test_set), translations.of(run, test_set)
        if theirs is None or mine is None:
            continue
        if theirs[1] != mine[1]:
            log.warning("%s, %s: different %s pairs, no bootstrap", ref.dir, run.dir, test_set)
            continue
        result = paired_bootstrap(theirs[0], mine[0], mine[1][1], resamples)
        p_values[run.seed], signature = result.p_value, result.signature
    return p_values, signature
