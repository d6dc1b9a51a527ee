"""Average the last N numbered checkpoints of a run into checkpoints/averaged.pt.

python scripts/average_checkpoints.py run=DIR last=5
python scripts/evaluate.py run=DIR checkpoint=averaged     # then use it
"""

import sys
from pathlib import Path

from minimt.checkpoint import average_last_checkpoints, load_checkpoint
from minimt.cli import parse_args

DEFAULTS = {"run": "???", "last": 5}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"

if __name__ == "__main__":
    args = parse_args(DEFAULTS, sys.argv[1:], USAGE)
    try:
        out = average_last_checkpoints(Path(args.run) / "checkpoints", args.last)
    except FileNotFoundError as error:
        sys.exit(f"error: {error}")
    print(f"averaged {', '.join(load_checkpoint(out)['averaged_from'])} -> {out}")
