"""Training and decoding speed, MFU and memory on the configured data and model: one process.

    python scripts/benchmark.py                         # the default model on Multi30k, this device
    python scripts/benchmark.py trainer.device=cuda     # the same on a GPU
    python scripts/benchmark.py experiment=smoke        # the whole benchmark in well under a minute
    python scripts/benchmark.py benchmark.run=RUN       # decoding speed of a trained run
    python scripts/benchmark.py --compare joeynmt       # + JoeyNMT trained side by side (minutes)

What it measures: the docstring of minimt.bench.benchmark. Prints a table and writes
benchmark.json into the Hydra run directory.
"""

import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from minimt.bench.benchmark import benchmark, format_table
from minimt.checkpoint import save_json
from minimt.cli import one_line_errors
from minimt.config import register_resolvers, validate_config
from minimt.runtime import reexec_with_mimalloc

register_resolvers()
PEERS = Path(__file__).parent / "peers"


@hydra.main(config_path="../configs", config_name="benchmark", version_base="1.3")
@one_line_errors
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    validate_config(cfg)
    report = benchmark(cfg, out, PEERS)
    save_json(out / "benchmark.json", report)
    print(format_table(report))
    print(f"wrote {out / 'benchmark.json'}")


def take_compare_flag(argv: list[str]) -> list[str]:
    """`--compare NAME` (README's spelling) as the Hydra override benchmark.compare=NAME."""
    if "--compare" not in argv:
        return argv
    at = argv.index("--compare")
    if at + 1 == len(argv):
        sys.exit("--compare needs a peer name: --compare joeynmt")
    return [*argv[:at], f"benchmark.compare={argv[at + 1]}", *argv[at + 2 :]]


if __name__ == "__main__":
    reexec_with_mimalloc()
    sys.argv = take_compare_flag(sys.argv)
    main()
