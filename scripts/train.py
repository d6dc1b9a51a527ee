"""Train a model: `python scripts/train.py [group=option] [key=value ...]` (Hydra overrides)."""

import logging
import sys

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from minimt.config import ConfigError
from minimt.corpus import DataError
from minimt.training import train

log = logging.getLogger("minimt")


@hydra.main(config_path="../configs", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    """Train one run in Hydra's output directory; return best val BLEU for sweepers."""
    run_dir = HydraConfig.get().runtime.output_dir
    try:
        metrics = train(cfg, run_dir)
    except (ConfigError, DataError) as error:
        log.error("%s", error)
        sys.exit(1)
    log.info("run directory: %s", run_dir)
    return metrics["best_val_bleu"]


if __name__ == "__main__":
    main()
