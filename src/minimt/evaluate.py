"""Score a trained run on its own splits or any files, per beam size (scripts/evaluate.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from minimt.atomic import write_text
from minimt.checkpoint import save_json
from minimt.data.corpus import read_lines, read_parallel
from minimt.data.splits import load_held_out, test_set_names
from minimt.metrics import CorpusScores, corpus_scores
from minimt.translator import Translator


@dataclass
class Evaluation:
    """One set translated with one beam: scores (None without references), speed, output file."""

    name: str
    beam: int
    scores: CorpusScores | None
    sentences_per_sec: float
    hyps_path: Path


def evaluation_sets(
    data: DictConfig, splits: Sequence[str] | None, src: str | None, ref: str | None
) -> dict[str, tuple[list[str], list[str] | None]]:
    """(sources, references or None) per set: the files src/ref, else the run's named splits
    (None: the test sets the run scored at its end)."""
    if src is not None:
        if ref is None:
            return {Path(src).name: (read_lines(src), None)}
        return {Path(src).name: read_parallel(src, ref)}
    names = test_set_names(data) if splits is None else list(splits)
    return dict(load_held_out(data, names))


def evaluate_sets(
    translator: Translator,
    sets: dict[str, tuple[list[str], list[str] | None]],
    beams: Sequence[int],
    length_penalty: float,
    hyps_path: Callable[[str, int], Path],
) -> list[Evaluation]:
    """Translate every set with every beam size; hyps_path(name, beam) says where each goes."""
    evaluations = []
    for name, (sources, references) in sets.items():
        for beam in beams:
            start = time.perf_counter()
            hyps = translator.translate(sources, beam=beam, length_penalty=length_penalty)
            seconds = time.perf_counter() - start
            out = hyps_path(name, beam)
            write_text(out, "".join(h + "\n" for h in hyps))
            scores = None if references is None else corpus_scores(hyps, references)
            evaluations.append(Evaluation(name, beam, scores, len(sources) / seconds, out))
    return evaluations


def record_evaluations(
    metrics_path: Path, evaluations: list[Evaluation], checkpoint: str, length_penalty: float
) -> None:
    """Add the scored evaluations to metrics.json under "eval" (created if missing)."""
    results = {
        f"{e.name}.beam{e.beam}.{checkpoint}": {
            **e.scores.as_dict(),
            "beam": e.beam,
            "checkpoint": checkpoint,
            "length_penalty": length_penalty,
            "sentences_per_sec": e.sentences_per_sec,
            "hyps": str(e.hyps_path),
        }
        for e in evaluations
        if e.scores is not None
    }
    if not results:
        return
    metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
    metrics.setdefault("eval", {}).update(results)
    save_json(metrics_path, metrics)
