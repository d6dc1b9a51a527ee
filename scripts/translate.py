"""Translate text with a trained run: stdin -> stdout, or files.

echo "Ein Hund rennt über die Wiese." | python scripts/translate.py run=DIR
python scripts/translate.py run=DIR input=file.de output=file.en beam=5 checkpoint=averaged
python scripts/translate.py run=EXPORT beam=5    # a CTranslate2 export (scripts/export.py)

`run` is a run directory, or a folder written by scripts/export.py: CTranslate2 then decodes
it, with the run's tokenizer, length caps and length penalty.
"""

import sys

from minimt.atomic import WriteError, write_text
from minimt.cli import one_line_errors, parse_args, setup_logging
from minimt.config import RULES as CONFIG_RULES
from minimt.data.corpus import text_lines
from minimt.errors import with_hint
from minimt.exported import open_translator
from minimt.rules import optional, path

DEFAULTS = {
    "run": "???",
    "checkpoint": "best",
    "input": None,
    "output": None,
    "beam": 1,
    "length_penalty": 1.0,
    "batch_tokens": None,  # the run's trainer.batch_tokens
    "device": "auto",
}
RULES = {
    "run": path,
    "checkpoint": path,
    "input": optional(path),
    "output": optional(path),
    # the rules of the config keys these arguments stand in for
    "beam": CONFIG_RULES["decoding.test_beam"],
    "length_penalty": CONFIG_RULES["decoding.length_penalty"],
    "batch_tokens": optional(CONFIG_RULES["trainer.batch_tokens"]),
    "device": CONFIG_RULES["trainer.device"],
}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    setup_logging()
    translator = open_translator(args.run, args.checkpoint, args.device, args.batch_tokens)
    translator.check_beams([args.beam])
    if args.input is None:
        lines = list(text_lines(sys.stdin.buffer, "stdin"))
    else:
        try:
            with open(args.input, "rb") as stream:
                lines = list(text_lines(stream, args.input))
        except OSError as error:
            sys.exit(f"error: cannot read input={args.input} ({error.strerror})")
    hyps = translator.translate(lines, beam=args.beam, length_penalty=args.length_penalty)
    text = "".join(h + "\n" for h in hyps)
    if args.output is None:
        # UTF-8 whatever the locale, like the input: a latin-1 or ASCII terminal must not crash it.
        sys.stdout.buffer.write(text.encode("utf-8"))
        return
    intact = f"output={args.output} was not written (a file already there is intact)"
    with with_hint(intact, WriteError):
        write_text(args.output, text)


if __name__ == "__main__":
    main(sys.argv[1:])
