"""Write a run's TensorBoard HPARAMS entry again, in today's names, from its records.

    python scripts/hparams.py run=outputs/2026-11-24/10-00-00
    tensorboard --logdir outputs      # HPARAMS: the run's row beside today's runs, same columns

A run trained by an earlier minimt names its HPARAMS columns as that version did (`d_model`,
`lr`, `pe`, ...), so beside today's runs it shows blank cells in every column of theirs. This
reads the run's metrics.json (the config from checkpoints/best.pt where the record has none),
brings it to today's run format (minimt.migrations) and writes the entry as today's training
does, into a TensorBoard run of its own, RUN/hparams/ (TensorBoard keeps the first entry a folder
shows, so the run's own folder could not take a second one). Nothing else of the run is touched;
running it again replaces RUN/hparams/ whole.
"""

import shutil
import sys
import tempfile
from pathlib import Path

from omegaconf import OmegaConf
from torch.utils.tensorboard import SummaryWriter

from minimt.cli import one_line_errors, parse_args
from minimt.errors import NotFound
from minimt.locks import writing
from minimt.rules import path
from minimt.study.runs import load_run
from minimt.study.views import log_hparams

DEFAULTS = {"run": "???"}
RULES = {"run": path}
USAGE = __doc__ + f"\narguments (key=value): {', '.join(DEFAULTS)}"
SESSION = "hparams"


def write_hparams(run_dir: Path) -> Path:
    """run_dir/hparams/: an event file holding the run's HPARAMS entry in today's names."""
    with writing(run_dir):
        return write_entry(run_dir)


def write_entry(run_dir: Path) -> Path:
    """write_hparams's work, the run held."""
    run, why = load_run(run_dir, None)
    if run is None:
        raise NotFound(f"{run_dir} holds no finished run to describe: {why}")
    out = run_dir / SESSION
    with tempfile.TemporaryDirectory(dir=run_dir, prefix=f".{SESSION}-") as tmp:
        with SummaryWriter(tmp) as writer:
            log_hparams(writer, OmegaConf.create(run.metrics["config"]), run.metrics)
        shutil.rmtree(out, ignore_errors=True)
        Path(tmp).rename(out)
        Path(tmp).mkdir()  # for TemporaryDirectory's own clean-up
    return out


@one_line_errors
def main(argv: list[str]) -> None:
    args = parse_args(DEFAULTS, argv, USAGE, RULES)
    print(f"wrote the HPARAMS entry in today's names -> {write_hparams(Path(args.run))}")


if __name__ == "__main__":
    main(sys.argv[1:])
