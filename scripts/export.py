"""Export a run's model to CTranslate2, the C++ inference engine (docs/export.md).

    python scripts/export.py run=DIR out=DIR
    python scripts/export.py run=DIR out=DIR checkpoint=averaged quantization=int8

`checkpoint` is best (default), last, averaged or a step file (step_800.pt). `quantization` is
float32 (default: the same outputs as minimt fp32) or int8 (per-row int8 weights: faster, some
outputs change). `out` must be new or empty; overwrite=true replaces it, once the new export is
whole. It holds CTranslate2's model files, the run's tokenizer and minimt_export.json (the run,
checkpoint, run format, tokenizer digest, decoding settings, minimt and CTranslate2 versions).
Needs the export extra: pip install -e ".[export]".
"""

import sys

from minimt.cli import one_line_errors, parse_args
from minimt.export import export_run
from minimt.rules import path

DEFAULTS = {
    "run": "???",
    "out": "???",
    "checkpoint": "best",
    "quantization": "float32",
    "overwrite": False,
}
RULES = {"run": path, "out": path}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    out = export_run(args.run, args.out, args.checkpoint, args.quantization, args.overwrite)
    print(f"exported {args.run} ({args.checkpoint}, {args.quantization}) -> {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
