"""Is one configuration better than another? Seed-paired test BLEU on each test set both have,
its verdict (Holm-corrected over every comparison made together), and sacreBLEU's paired
bootstrap per seed pair, with the references read from each run's data config."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from minimt.data.corpus import MULTI30K_URL, DataError, Pairs
from minimt.data.splits import load_held_out
from minimt.study.runs import Configuration, DataRegime, Run
from minimt.study.significance import (
    PairedDifference,
    holm,
    paired_bootstrap,
    paired_difference,
    verdict,
)

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
    holm_p: float | None = None
    verdict: str = "inconclusive"


def shared_test_sets(runs: Sequence[Run]) -> list[str]:
    """The test sets every run has, in the first run's order."""
    common = set.intersection(*(set(run.test_sets) for run in runs))
    return [name for name in runs[0].test_sets if name in common]


def comparison_pairs(configurations: Sequence[Configuration]) -> list[tuple[Configuration, ...]]:
    """(reference, system) pairs: every configuration against its regime's baseline, then every
    length split against its random control with the same embedding choices."""
    present = set(configurations)
    pairs = [(c.baseline, c) for c in configurations if not c.is_baseline and c.baseline in present]
    for control in configurations:
        if control.regime.is_control:
            words = control.regime.long_tests_over
            split = Configuration(DataRegime(words, words, None), control.embedding)
            if split in present:
                pairs.append((control, split))
    return pairs


def compare_all(
    groups: dict[Configuration, list[Run]],
    headline: str,
    translations: Translations,
    resamples: int,
) -> tuple[list[Comparison], str | None]:
    """Every comparison on every test set both sides have (the headline first), with Holm's
    correction over all of them that have a p-value; and the bootstrap's signature."""
    comparisons, signature = [], None
    for reference, system in comparison_pairs(list(groups)):
        both = groups[reference] + groups[system]
        names = shared_test_sets(both)
        for name in sorted(names, key=lambda n: n != headline):
            comparison, found = compare(
                groups[reference], groups[system], name, translations, resamples
            )
            if comparison is not None:
                comparisons.append(comparison)
                signature = signature or found
    tested = [c for c in comparisons if c.difference.p_value is not None]
    for comparison, adjusted in zip(
        tested, holm([c.difference.p_value for c in tested]), strict=True
    ):
        comparison.holm_p = adjusted
    for comparison in comparisons:
        comparison.verdict = verdict(comparison.difference, comparison.holm_p)
    return comparisons, signature


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
    comparison = Comparison(
        reference[0].configuration, system[0].configuration, test_set, seeds, difference, bootstrap
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
