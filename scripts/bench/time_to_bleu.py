"""Validation BLEU against training time: minimt's run and, optionally, a peer's, side by side.

    python scripts/train.py trainer.max_minutes=30 hydra.run.dir=outputs/time30
    bash scripts/peers/joeynmt.sh --minutes 30
    python scripts/bench/time_to_bleu.py run=outputs/time30 peer=outputs/peers/joeynmt/results.json

Reads the run's metrics.json (val_history: step, training seconds at the validation, greedy val
BLEU) and the peer's results.json (val_curve, same fields), prints the BLEU each system had at
the `marks` (minutes: its last validation at or before the mark) and at its end, and writes
time_to_bleu.json and time_to_bleu.png into the run directory.
"""

import json
import sys
from pathlib import Path

from minimt.cli import one_line_errors, parse_args
from minimt.study.plots import figure, save

DEFAULTS = {"run": "???", "peer": None, "peer_name": "joeynmt", "marks": [5, 10, 15, 20, 25, 30]}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


def curve_of(path: Path, key: str) -> list[tuple[float, float]]:
    """(training seconds, val BLEU) of each validation recorded under `key` in a JSON file."""
    try:
        entries = json.loads(path.read_text())[key]
        return [(entry["seconds"], entry["bleu"]) for entry in entries]
    except (OSError, ValueError, KeyError) as error:
        sys.exit(f"error: {path} has no readable {key} with seconds and bleu ({error!r})")


def bleu_at(curve: list[tuple[float, float]], minutes: float) -> float | None:
    """BLEU of the last validation at or before `minutes` (None before the first)."""
    earlier = [bleu for seconds, bleu in curve if seconds <= minutes * 60]
    return earlier[-1] if earlier else None


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE)
    run = Path(args.run)
    curves = {"minimt": curve_of(run / "metrics.json", "val_history")}
    if args.peer:
        curves[args.peer_name] = curve_of(Path(args.peer), "val_curve")
    table = {m: {name: bleu_at(curve, m) for name, curve in curves.items()} for m in args.marks}
    print("minutes | " + " | ".join(curves))
    for minutes, row in table.items():
        cells = ("-" if b is None else f"{b:.2f}" for b in row.values())
        print(f"{minutes} | " + " | ".join(cells))
    # a budget's last validation runs when the budget is spent, a little after the mark
    ends = (f"{curve[-1][1]:.2f} ({curve[-1][0] / 60:.1f} min)" for curve in curves.values())
    print("end | " + " | ".join(ends))
    (run / "time_to_bleu.json").write_text(json.dumps({"curves": curves, "at_minutes": table}))
    fig, axes = figure()
    for name, points in curves.items():
        axes.plot([s / 60 for s, _ in points], [b for _, b in points], marker="o", label=name)
    title = "BLEU against wall-clock time"
    save(fig, axes, run / "time_to_bleu.png", "training minutes", "validation BLEU (greedy)", title)
    print(f"wrote {run / 'time_to_bleu.json'} and {run / 'time_to_bleu.png'}")


if __name__ == "__main__":
    main(sys.argv[1:])
