"""A collected run's test hypotheses as evidence: kept compressed, one archive per configuration,
each file pinned by SHA-256 in its run's record, and every test score a record states recomputed
from them.

Layout (scripts/collect_runs.py writes it):

    <dest>/<protocol>/<configuration>/hypotheses.tar.xz   seed<k>/hyps.<test set>[.average].txt
    <dest>/<protocol>/<configuration>/seed<k>/metrics.json  "hypotheses": {file name: sha256}

A record's scores under "test" and "test_average" are recomputed with sacreBLEU from the archived
hypotheses and the pinned references; the pooled long-sentence entry from its buckets' files.
"""

from __future__ import annotations

import hashlib
import io
import math
import tarfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

ARCHIVE = "hypotheses.tar.xz"
PINS = "hypotheses"  # the record's key: {hyps file name: its sha256}
SCORED = {"test": "", "test_average": ".average"}  # record key -> the file suffix of its hyps
# How far a recomputed score may be from the stated one, in units in the last place: BLEU goes
# through log and exp, which two machines' math libraries may round apart (the study's records
# from the H200 differ from a CPU's recomputation by up to 6); chrF is arithmetic alone.
TOLERANCE_ULPS = {"bleu": 8, "chrf": 0}


def hyps_file(test_set: str, key: str) -> str:
    """The name of the hypotheses file of `test_set` under record key `key` (test, test_average)."""
    return f"hyps.{test_set}{SCORED[key]}.txt"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def pins(files: dict[str, bytes]) -> dict[str, str]:
    """{file name: sha256} of `files`, sorted by name."""
    return {name: sha256(files[name]) for name in sorted(files)}


def read_archive(path: Path) -> dict[str, bytes]:
    """{member name: bytes} of the archive at `path` ({} when there is none)."""
    if not path.is_file():
        return {}
    with tarfile.open(path, "r:xz") as archive:
        return {m.name: archive.extractfile(m).read() for m in archive.getmembers() if m.isfile()}


def archive_bytes(members: dict[str, bytes]) -> bytes:
    """A tar.xz of `members`, the same bytes for the same members: sorted, no times, no owners."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz", format=tarfile.USTAR_FORMAT, preset=9) as tar:
        for name in sorted(members):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(members[name]), 0o644
            tar.addfile(info, io.BytesIO(members[name]))
    return buffer.getvalue()


def run_members(archive: dict[str, bytes], run_dir: Path) -> dict[str, bytes]:
    """The files of the run in `run_dir` that its configuration's archive holds, by file name."""
    prefix = f"{run_dir.name}/"
    return {n.removeprefix(prefix): data for n, data in archive.items() if n.startswith(prefix)}


def with_run(archive: dict[str, bytes], run_dir: Path, files: dict[str, bytes]) -> dict[str, bytes]:
    """`archive` with the members of the run in `run_dir` replaced by `files`."""
    prefix = f"{run_dir.name}/"
    kept = {name: data for name, data in archive.items() if not name.startswith(prefix)}
    return kept | {prefix + name: data for name, data in files.items()}


class SegmentScores:
    """sacreBLEU's corpus BLEU and chrF (minimt.metrics' settings), each (reference, hypothesis)
    pair's statistics computed once: the runs of one test set repeat most of their sentences."""

    def __init__(self) -> None:
        self.metrics = {"bleu": BLEU(), "chrf": CHRF()}
        self.references: dict[tuple[str, str], object] = {}
        self.segments: dict[tuple[str, str, str], list] = {}

    def corpus(self, hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
        """{"bleu": ..., "chrf": ...} of `hyps` against `refs` (one reference each)."""
        if len(hyps) != len(refs):
            raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references: they must align")
        return {
            name: metric._aggregate_and_compute(
                [self._segment(name, hyp, ref) for hyp, ref in zip(hyps, refs, strict=True)]
            ).score
            for name, metric in self.metrics.items()
        }

    def _segment(self, name: str, hyp: str, ref: str) -> list:
        key = (name, ref, hyp)
        if key not in self.segments:
            metric = self.metrics[name]
            if (name, ref) not in self.references:
                reference = [metric._preprocess_segment(ref)]
                self.references[name, ref] = metric._extract_reference_info(reference)
            segment = metric._preprocess_segment(hyp)
            self.segments[key] = metric._compute_segment_statistics(
                segment, self.references[name, ref]
            )
        return self.segments[key]


@dataclass(frozen=True)
class Check:
    """One score a record states, against what its hypotheses give."""

    record: Path
    entry: str  # "test/test_2016_flickr", "test_average/pooled_long", ...
    metric: str  # bleu | chrf
    stated: float
    recomputed: float

    @property
    def agrees(self) -> bool:
        tolerance = TOLERANCE_ULPS[self.metric] * math.ulp(self.recomputed)
        return abs(self.stated - self.recomputed) <= tolerance


class EvidenceError(Exception):
    """A record whose hypotheses are missing or differ from their pins."""


def recorded_hyps(record_path: Path, record: dict, archive: dict[str, bytes]) -> dict[str, str]:
    """{file name: text} of the hypotheses the record pins, each checked against its pin."""
    members = run_members(archive, record_path.parent)
    pinned = record.get(PINS, {})
    texts = {}
    for name, digest in pinned.items():
        if name not in members:
            raise EvidenceError(f"{record_path}: {name} is pinned but not in its {ARCHIVE}")
        if sha256(members[name]) != digest:
            raise EvidenceError(f"{record_path}: {name} differs from its pinned sha256")
        texts[name] = members[name].decode("utf-8")
    return texts


def checks(
    record_path: Path,
    record: dict,
    hyps: dict[str, str],
    references: Callable[[Sequence[str]], dict[str, list[str]]],
    scorer: SegmentScores,
) -> Iterator[Check]:
    """Every BLEU and chrF the record states under "test" and "test_average", recomputed from
    `hyps` ({file name: text}) against `references(test set names)` ({name: lines})."""
    for key in SCORED:
        for name, entry in (record.get(key) or {}).items():
            sets = entry.get("pooled", [name])
            files = [hyps_file(s, key) for s in sets]
            missing = [f for f in files if f not in hyps]
            if missing:
                raise EvidenceError(f"{record_path}: {key}/{name} has no {', '.join(missing)}")
            refs = references(sets)
            pooled_hyps = [line for f in files for line in hyps[f].splitlines()]
            pooled_refs = [line for s in sets for line in refs[s]]
            scores = scorer.corpus(pooled_hyps, pooled_refs)
            for metric, value in scores.items():
                yield Check(record_path, f"{key}/{name}", metric, entry[metric], value)


def unscored_figures(record: dict) -> list[str]:
    """The key paths of the BLEU and chrF figures in `record` that no kept hypotheses back
    (validation history, averaged validation scores, ...): all but "test" and "test_average"."""
    found: list[str] = []

    def walk(node: object, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(value, f"{path}.{key}" if path else key)
        elif isinstance(node, list):
            for value in node:
                walk(value, f"{path}[]")
        elif is_score(node) and path.rsplit(".", 1)[-1].endswith(("bleu", "chrf")):
            found.append(path)

    for key, value in record.items():
        if key not in {*SCORED, "config"}:
            walk(value, key)
    return sorted(set(found))


def is_score(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def record_paths(root: Path) -> list[Path]:
    """Every collected record (metrics.json) under `root`, sorted."""
    return sorted(root.rglob("metrics.json"))


def archive_of(run_dir: Path) -> Path:
    """The archive holding the hypotheses of the collected run in `run_dir`: its configuration's."""
    return run_dir.parent / ARCHIVE
