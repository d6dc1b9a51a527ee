"""The committed evidence checks itself: every BLEU and chrF that a collected run record under docs/
states for its test sets is what sacreBLEU gives on the hypotheses its configuration's archive
holds (each pinned by SHA-256 in the record) against the pinned Multi30k references."""

import json
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from minimt.data.length_split import POOLED_LONG
from minimt.data.splits import load_held_out
from minimt.metrics import corpus_scores
from minimt.study.evidence import (
    PINS,
    SCORED,
    Check,
    EvidenceError,
    SegmentScores,
    archive_of,
    checks,
    hyps_file,
    read_archive,
    record_paths,
    recorded_hyps,
    unscored_figures,
)
from minimt.study.runs import load_run
from tests.helpers import REPO

DOCS = REPO / "docs"
# The figures a record states that no kept hypotheses back, and why.
UNSCORED = {
    "best_val_bleu": "validation BLEU, scored during training (its hypotheses are not kept)",
    "val_history[].bleu": "validation BLEU at each validation",
    "eval.val.beam1.averaged.bleu": "validation BLEU of the averaged checkpoint (evaluate.py)",
    "eval.val.beam1.averaged.chrf": "validation chrF of the averaged checkpoint (evaluate.py)",
}


def load(path: Path) -> dict:
    return json.loads(path.read_text())


class Evidence:
    """The records under docs/, their archives and the references their configs name, each read
    once; the statistics of each (reference, hypothesis) pair computed once."""

    def __init__(self, multi30k: Path, cache_dir: Path) -> None:
        self.multi30k, self.cache_dir = multi30k, cache_dir
        self.scorer = SegmentScores()
        self.archive = cache(read_archive)
        self.held_out: dict[tuple[str, str], list[str]] = {}  # (data config, set) -> references

    def references(self, record_path: Path) -> Callable[[Sequence[str]], dict[str, list[str]]]:
        """The reference lines of the named test sets as the record's data config reads them,
        from the pinned Multi30k files in `multi30k`."""
        run, reason = load_run(record_path.parent, None)
        assert run is not None, f"{record_path}: {reason}"
        data = OmegaConf.to_container(run.config.data)
        data |= {"url": str(self.multi30k), "dir": str(self.cache_dir)}
        key = json.dumps(data, sort_keys=True)

        def lines(names: Sequence[str]) -> dict[str, list[str]]:
            for name in names:
                if (key, name) not in self.held_out:
                    held_out = load_held_out(OmegaConf.create(data), [name])
                    self.held_out[key, name] = held_out[name][1]
            return {name: self.held_out[key, name] for name in names}

        return lines

    def checks(self, record_path: Path, record: dict | None = None) -> list[Check]:
        record = record if record is not None else load(record_path)
        hyps = recorded_hyps(record_path, record, self.archive(archive_of(record_path.parent)))
        found = checks(record_path, record, hyps, self.references(record_path), self.scorer)
        return list(found)


@pytest.fixture(scope="module")
def evidence(multi30k_dir, tmp_path_factory) -> Evidence:
    return Evidence(multi30k_dir, tmp_path_factory.mktemp("multi30k"))


RECORDS = record_paths(DOCS)


def scored_files(record: dict) -> list[str]:
    """The hypotheses file of each test score `record` states (a pooled entry: none of its own)."""
    return [
        hyps_file(name, key)
        for key in SCORED
        for name, entry in (record.get(key) or {}).items()
        if "pooled" not in entry
    ]


def test_every_collected_record_pins_exactly_the_hypotheses_of_its_test_scores():
    assert len(RECORDS) >= 271
    for path in RECORDS:
        record = load(path)
        assert record.get("test"), f"{path}: no test scores"
        assert sorted(record[PINS]) == sorted(scored_files(record)), path


@pytest.mark.slow
def test_every_stated_test_score_is_what_its_pinned_hypotheses_give(evidence):
    stated = sorted(RECORDS, key=lambda path: sorted(load(path)["test"]))  # test sets together
    results = [check for path in stated for check in evidence.checks(path)]
    wrong = [check for check in results if not check.agrees]
    assert not wrong, "\n".join(
        f"{c.record} {c.entry} {c.metric}: states {c.stated!r}, hypotheses give {c.recomputed!r}"
        for c in wrong
    )
    edited = [
        replace(check, stated=float(figure))
        for check in results
        for figure in edits(repr(check.stated), 0, len(repr(check.stated)))
    ]
    assert not [check for check in edited if check.agrees]  # any figure, one digit changed
    entries = sum(len(load(path).get(key) or {}) for path in RECORDS for key in SCORED)
    assert len(results) == 2 * entries  # a BLEU and a chrF for each
    assert any(check.entry.endswith(f"/{POOLED_LONG}") for check in results)


def test_every_figure_without_hypotheses_is_a_validation_figure():
    unscored = Counter(path for record in RECORDS for path in unscored_figures(load(record)))
    assert set(unscored) == set(UNSCORED), f"figures without hypotheses: {dict(unscored)}"


def first_record(holds) -> Path:
    """The first collected record for which holds(record) is true."""
    return next(path for path in RECORDS if holds(load(path)))


def edits(text: str, start: int, length: int) -> Iterator[str]:
    """`text` with one digit of text[start:start + length] changed, for each digit but the last
    two (which TOLERANCE_ULPS leaves to the math libraries)."""
    digits = [i for i in range(start, start + length) if text[i].isdigit()]
    for at in digits[:-2]:
        yield text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1 :]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["test_average", POOLED_LONG])
def test_a_one_character_edit_of_a_stated_bleu_fails_the_check(evidence, kind):
    """Each stated BLEU of a record with an averaged checkpoint's scores, and of one with a
    pooled long-sentence entry, edited in its metrics.json (every digit of every figure: the
    test above)."""
    if kind == POOLED_LONG:
        path = first_record(lambda record: POOLED_LONG in record["test"])
    else:
        path = first_record(lambda record: bool(record.get(kind)))
    text, record = path.read_text(), load(path)
    assert all(check.agrees for check in evidence.checks(path, record))
    for key in [key for key in SCORED if record.get(key)]:
        for entry, scores in record[key].items():
            stated = f'"bleu": {scores["bleu"]!r},'
            assert text.count(stated) == 1, stated
            start = text.index(stated) + len('"bleu": ')
            edited = next(edits(text, start, len(repr(scores["bleu"]))))  # its first digit
            failing = [c for c in evidence.checks(path, json.loads(edited)) if not c.agrees]
            assert [(c.entry, c.metric) for c in failing] == [(f"{key}/{entry}", "bleu")]


def test_an_edited_hypothesis_file_differs_from_its_pin(tmp_path):
    path = RECORDS[0]
    archive = read_archive(archive_of(path.parent))
    record = load(path)
    name = next(iter(record[PINS]))
    member = f"{path.parent.name}/{name}"
    archive[member] = archive[member].replace(b"a", b"b", 1)
    with pytest.raises(EvidenceError, match=f"{re.escape(name)} differs from its pinned sha256"):
        recorded_hyps(path, record, archive)
    del archive[member]
    with pytest.raises(EvidenceError, match=f"{re.escape(name)} is pinned but not in its"):
        recorded_hyps(path, record, archive)


def test_segment_statistics_give_sacrebleus_corpus_scores_bit_for_bit():
    archive = read_archive(archive_of(RECORDS[0].parent))
    same_set = sorted(name for name in archive if name.endswith("/hyps.test_2016_flickr.txt"))
    refs, *systems = [archive[name].decode().splitlines() for name in same_set[:4]]
    scorer = SegmentScores()
    for hyps in systems:
        direct = corpus_scores(hyps, refs)
        assert scorer.corpus(hyps, refs) == {"bleu": direct.bleu, "chrf": direct.chrf}
