"""Score a trained run with sacreBLEU (BLEU, chrF and their signatures), per split and beam.

    python scripts/evaluate.py run=DIR beam=5                                  # test_2016_flickr
    python scripts/evaluate.py run=DIR split=[val,test_2016_flickr] beam=[1,5]
    python scripts/evaluate.py run=DIR src=my.de ref=my.en beam=5 out=hyp.en  # any files
    python scripts/evaluate.py run=DIR average=5             # average the last 5 checkpoints first

Results are printed as a table, appended to RUN/metrics.json under "eval", and the translations
written to RUN/hyps/<split>.beam<k>.<checkpoint>.txt (or `out`).
"""

import json
import sys
import time
from pathlib import Path

from omegaconf import DictConfig, ListConfig

from minimt.checkpoint import average_last_checkpoints, save_json
from minimt.cli import parse_args, setup_logging
from minimt.corpus import DataError, load_multi30k, read_lines, read_parallel
from minimt.metrics import corpus_scores
from minimt.translator import Translator

DEFAULTS = {
    "run": "???",
    "checkpoint": "best",
    "average": None,
    "split": ["test_2016_flickr"],
    "beam": [5],
    "length_penalty": 1.0,
    "src": None,
    "ref": None,
    "out": None,
    "batch_tokens": 4096,
    "device": "auto",
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def as_list(value) -> list:
    return list(value) if isinstance(value, ListConfig | list) else [value]


def evaluation_sets(
    args: DictConfig, data: DictConfig
) -> dict[str, tuple[list[str], list[str] | None]]:
    """(sources, references or None) per set: the given files, or the run's own splits."""
    if args.src is not None:
        if args.ref is None:
            return {Path(args.src).name: (read_lines(args.src), None)}
        return {Path(args.src).name: read_parallel(args.src, args.ref)}
    splits = as_list(args.split)
    if data.name == "multi30k":
        return load_multi30k(data.url, data.dir, data.src_lang, data.tgt_lang, splits)
    return {split: read_parallel(data[split].src, data[split].tgt) for split in splits}


def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    setup_logging()
    run = Path(args.run)
    checkpoint = args.checkpoint
    if args.average:
        average_last_checkpoints(run / "checkpoints", args.average)
        checkpoint = "averaged"
    translator = Translator.from_run(run, checkpoint, args.device, args.batch_tokens)
    try:
        sets = evaluation_sets(args, translator.config.data)
    except DataError as error:
        sys.exit(f"error: {error}")

    rows, results = [], {}
    for name, (sources, references) in sets.items():
        for beam in as_list(args.beam):
            start = time.perf_counter()
            hyps = translator.translate(sources, beam=beam, length_penalty=args.length_penalty)
            seconds = time.perf_counter() - start
            out = (
                Path(args.out) if args.out else run / "hyps" / f"{name}.beam{beam}.{checkpoint}.txt"
            )
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
            if references is None:
                print(f"{name} beam {beam}: {len(hyps)} translations -> {out}")
                continue
            scores = corpus_scores(hyps, references)
            key = f"{name}.beam{beam}.{checkpoint}"
            results[key] = {
                **scores.as_dict(),
                "beam": beam,
                "checkpoint": checkpoint,
                "length_penalty": args.length_penalty,
                "sentences_per_sec": len(sources) / seconds,
                "hyps": str(out),
            }
            rows.append((name, beam, checkpoint, scores, len(sources) / seconds))
    print_table(rows)
    if results:
        metrics_path = run / "metrics.json"
        metrics = json.loads(metrics_path.read_text()) if metrics_path.is_file() else {}
        metrics.setdefault("eval", {}).update(results)
        save_json(metrics_path, metrics)


def print_table(rows) -> None:
    if not rows:
        return
    print(f"{'split':<20} {'beam':>4} {'checkpoint':<10} {'BLEU':>6} {'chrF':>6} {'sent/s':>7}")
    for name, beam, checkpoint, scores, speed in rows:
        print(
            f"{name:<20} {beam:>4} {checkpoint:<10} {scores.bleu:>6.2f} {scores.chrf:>6.2f} "
            f"{speed:>7.1f}"
        )
    print(f"BLEU signature: {rows[0][3].bleu_signature}")
    print(f"chrF signature: {rows[0][3].chrf_signature}")


if __name__ == "__main__":
    main(sys.argv[1:])
