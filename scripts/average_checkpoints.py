"""Average the last N numbered checkpoints of a run into checkpoints/averaged.pt.

python scripts/average_checkpoints.py run=DIR last=5
python scripts/evaluate.py run=DIR checkpoint=averaged     # then use it
"""

import sys

from minimt.checkpoint import average_last_checkpoints, load_checkpoint
from minimt.cli import one_line_errors, parse_args
from minimt.locks import writing
from minimt.rules import path, positive_int
from minimt.rundir import checkpoint_dir

DEFAULTS = {"run": "???", "last": 5}
RULES = {"run": path, "last": positive_int}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    ckpt_dir = checkpoint_dir(args.run)
    with writing(ckpt_dir.parent):
        out = average_last_checkpoints(ckpt_dir, args.last)
    print(f"averaged {', '.join(load_checkpoint(out)['averaged_from'])} -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
