"""Training and decoding speed, MFU and memory on the configured data and model: one process.

    python scripts/benchmark.py                         # the default model on Multi30k, this device
    python scripts/benchmark.py trainer.device=cuda     # the same on a GPU
    python scripts/benchmark.py experiment=smoke        # the whole benchmark in well under a minute
    python scripts/benchmark.py benchmark.run=RUN       # decoding speed of a trained run
    python scripts/benchmark.py --compare joeynmt       # + JoeyNMT trained side by side (minutes)

Measures (a) the matmul roof: FLOP/s of large bf16 and fp32 products; (b) training steps/s and
target and source tokens/s on the real token-count batches, after warm-up, median of several
windows; (c) model FLOPs per target token (minimt.bench.flops: attention included, real tokens only)
and MFU = achieved model FLOP/s / the roof of the training precision; (d) the padding fraction
of an epoch's batches; (e) decoding sentences/s on the first test set: greedy with and without
the key/value cache, beam 5 (with no benchmark.run, the barely trained model decodes to the
length cap: a worst case); (f) peak RSS and, on GPU, peak allocated memory; (g) the effect of
each fast-path setting: training tokens/s of `benchmark.variants` (one setting changed each)
taking turns window by window with the config; (h) with `--compare NAME`, the peer toolkit
trained by scripts/peers/NAME.sh for `benchmark.compare_minutes`. Prints a table and writes
benchmark.json into the Hydra run directory.
"""

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from minimt.bench.benchmark import benchmark, format_table
from minimt.checkpoint import save_json
from minimt.config import ConfigError, register_resolvers, validate_config
from minimt.data.corpus import DataError
from minimt.runtime import reexec_with_mimalloc

log = logging.getLogger("minimt")
register_resolvers()
PEERS = Path(__file__).parent / "peers"


@hydra.main(config_path="../configs", config_name="benchmark", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out = Path(HydraConfig.get().runtime.output_dir)
    try:
        validate_config(cfg)
        report = benchmark(cfg, out, PEERS)
    except (ConfigError, DataError) as error:
        log.error("%s", error)
        sys.exit(1)
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
