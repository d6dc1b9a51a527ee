"""Score a trained run with sacreBLEU (BLEU, chrF and their signatures), per split and beam.

    python scripts/evaluate.py run=DIR beam=5                   # the run's test sets
    python scripts/evaluate.py run=DIR split=[val,test_2016_flickr] beam=[1,5]
    python scripts/evaluate.py run=DIR src=my.de ref=my.en beam=5 out=hyp.en  # any files
    python scripts/evaluate.py run=DIR average=5             # average the last 5 checkpoints first
    python scripts/evaluate.py run=DIR export=EXPORT beam=5  # its CTranslate2 export (export.py)

Results are printed as a table, appended to RUN/metrics.json under "eval", and the translations
written to RUN/hyps/<split>.beam<k>.<checkpoint>.txt (or `out`). `batch_tokens` (null: the run's
trainer.batch_tokens) only changes speed. With `export`, CTranslate2 decodes the run's export and
its results are named after it (best.ctranslate2-float32, ...), beside minimt's own.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from minimt.atomic import WriteError, write_text
from minimt.checkpoint import average_last_checkpoints, load_checkpoint
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.config import RULES as CONFIG_RULES
from minimt.data.corpus import DataError, Pairs, read_lines, read_parallel
from minimt.data.splits import load_held_out, test_set_names
from minimt.errors import with_hint
from minimt.export import ExportError
from minimt.exported import ExportedTranslator
from minimt.locks import writing
from minimt.metrics import CorpusScores, corpus_scores
from minimt.rules import at_least, optional, path, positive_int, positive_int_list, split_names
from minimt.rundir import checkpoint_dir, read_metrics, update_metrics
from minimt.translator import Translator

DEFAULTS = {
    "run": "???",
    "checkpoint": "best",
    "average": None,
    "split": None,
    "beam": [5],
    "length_penalty": 1.0,
    "src": None,
    "ref": None,
    "out": None,
    "batch_tokens": None,
    "device": "auto",
    "export": None,
}
RULES = {
    "run": path,
    "checkpoint": path,
    "average": optional(at_least(2)),
    "split": optional(lambda v: None if isinstance(v, str) and v else split_names(v)),
    "beam": lambda v: positive_int(v) and positive_int_list(v),
    "length_penalty": CONFIG_RULES["decoding.length_penalty"],
    "src": optional(path),
    "ref": optional(path),
    "out": optional(path),
    "batch_tokens": optional(CONFIG_RULES["trainer.batch_tokens"]),
    "device": CONFIG_RULES["trainer.device"],
    "export": optional(path),
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


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
    (None: the test sets the run scored at its end); a set to score without a sentence is a
    DataError naming it, before any work."""
    if src is not None:
        if ref is None:
            return {Path(src).name: (read_lines(src), None)}
        pairs = read_parallel(src, ref)
        return {Path(src).name: scorable(pairs, f"src={src} and ref={ref} have no lines")}
    names = test_set_names(data) if splits is None else list(splits)
    return {
        name: scorable(pairs, f"split={name} of this run holds no pair")
        for name, pairs in load_held_out(data, names).items()
    }


def scorable(pairs: Pairs, empty: str) -> Pairs:
    """`pairs` where they hold a sentence; else a DataError saying `empty`."""
    if not pairs[0]:
        raise DataError(f"{empty}: no sentence to score (BLEU and chrF need one)")
    return pairs


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


def averaged_steps(run: Path) -> list[str]:
    """The step checkpoints the run's averaged.pt was averaged from: ["step_900.pt", ...]."""
    return load_checkpoint(checkpoint_dir(run) / "averaged.pt")["averaged_from"]


def record_evaluations(
    run: Path,
    evaluations: list[Evaluation],
    checkpoint: str,
    length_penalty: float,
    averaged_from: list[str] | None = None,
) -> None:
    """Add the scored evaluations to the run's metrics.json under "eval", merged into what it
    holds as they are written (minimt.rundir.update_metrics): each with its hypotheses' file
    (relative to the run where it lies inside it) and, for an averaged checkpoint, the step
    checkpoints it averaged."""
    results = {
        f"{e.name}.beam{e.beam}.{checkpoint}": {
            **e.scores.as_dict(),
            "beam": e.beam,
            "checkpoint": checkpoint,
            "length_penalty": length_penalty,
            "sentences_per_sec": e.sentences_per_sec,
            "hyps": hyps_name(run, e.hyps_path),
            **({"averaged_from": averaged_from} if averaged_from is not None else {}),
        }
        for e in evaluations
        if e.scores is not None
    }
    if not results:
        return
    update_metrics(run, lambda metrics: metrics | {"eval": metrics.get("eval", {}) | results})


def hyps_name(run: Path, hyps: Path) -> str:
    """`hyps` relative to the run directory where it lies inside it (the record stays true when
    the run is moved or collected), else as given."""
    where, root = hyps.resolve(), run.resolve()
    return where.relative_to(root).as_posix() if where.is_relative_to(root) else str(hyps)


def as_list(value) -> list | None:
    if value is None:
        return None
    return list(value) if isinstance(value, ListConfig | list) else [value]


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    setup_logging()
    run = checkpoint_dir(args.run).parent
    with writing(run):
        read_metrics(run)  # a damaged one stops us before work
        evaluate_run(run, args)


def evaluate_run(run: Path, args: DictConfig) -> None:
    """Translate and score what `args` ask for, the results printed and added to the run."""
    checkpoint = args.checkpoint
    if args.export and (args.average or checkpoint != DEFAULTS["checkpoint"]):
        raise ExportError(
            "export= decodes the checkpoint that was exported: drop average= and checkpoint=, "
            "or export that checkpoint (scripts/export.py checkpoint=...) and evaluate the export"
        )
    if args.average:
        average_last_checkpoints(checkpoint_dir(run), args.average)
        checkpoint = "averaged"
    averaged_from = averaged_steps(run) if checkpoint == "averaged" else None
    translator = Translator.from_run(run, checkpoint, args.device, args.batch_tokens)
    data = translator.config.data
    if args.export:
        translator = ExportedTranslator.from_export(args.export)
        translator.check_run(run)
        checkpoint, averaged_from = translator.checkpoint_label, None
    translator.check_beams(as_list(args.beam))
    sets = evaluation_sets(data, as_list(args.split), args.src, args.ref)

    def hyps_path(name: str, beam: int) -> Path:
        return Path(args.out) if args.out else run / "hyps" / f"{name}.beam{beam}.{checkpoint}.txt"

    intact = f"{run / 'metrics.json'} is as it was, the translations written before are complete"
    with with_hint(intact, WriteError):
        evaluations = evaluate_sets(
            translator, sets, as_list(args.beam), args.length_penalty, hyps_path
        )
        print_table(evaluations, checkpoint)
        record_evaluations(run, evaluations, checkpoint, args.length_penalty, averaged_from)


def print_table(evaluations: list[Evaluation], checkpoint: str) -> None:
    for e in evaluations:
        if e.scores is None:
            print(f"{e.name} beam {e.beam}: translations -> {e.hyps_path}")
    scored = [e for e in evaluations if e.scores is not None]
    if not scored:
        return
    print(f"{'split':<20} {'beam':>4} {'checkpoint':<10} {'BLEU':>6} {'chrF':>6} {'sent/s':>7}")
    for e in scored:
        print(
            f"{e.name:<20} {e.beam:>4} {checkpoint:<10} {e.scores.bleu:>6.2f} "
            f"{e.scores.chrf:>6.2f} {e.sentences_per_sec:>7.1f}"
        )
    print(f"BLEU signature: {scored[0].scores.bleu_signature}")
    print(f"chrF signature: {scored[0].scores.chrf_signature}")


if __name__ == "__main__":
    main(sys.argv[1:])
