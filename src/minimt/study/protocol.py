"""Which protocol trained a run: the model and training settings of one of the study's
experiment configs (configs/experiment) and the precision it ran in. Runs of different protocols
are never paired: each protocol is its own section of the report, with its own baseline."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

# The project's configs, read from the working directory as scripts/train.py and the data paths
# are: reports are made from the project's root.
CONFIG_DIR = Path("configs")

# The settings that make two runs comparable: the model, the vocabulary, the optimisation and the
# stopping rule. Caps (max_steps, max_minutes), threads and the seed are not among them.
PROTOCOL_KEYS = (
    "model.d_model",
    "model.n_heads",
    "model.n_encoder_layers",
    "model.n_decoder_layers",
    "model.d_ff",
    "model.dropout",
    "tokenizer.vocab_size",
    "tokenizer.joint",
    "trainer.batch_tokens",
    "trainer.accumulate",
    "trainer.lr",
    "trainer.warmup_steps",
    "trainer.patience",
    "trainer.min_delta",
    "trainer.val_every",
    "data.max_train_len",
    "data.max_val_pairs",
)


@dataclass(frozen=True)
class Protocol:
    """A study protocol: an experiment config run in one precision on one kind of device."""

    name: str  # "" for runs that match no declared protocol (grouped as configured)
    experiment: str | None  # configs/experiment/<experiment>.yaml
    precision: str | None
    device_kind: str | None  # cuda | cpu
    device: str  # in words, for the report
    slug_prefix: str  # before a configuration's slug ("" for the main protocol)

    def slug(self, local_slug: str) -> str:
        """A configuration's slug within this protocol as the report names it: cpu-full-rope."""
        return f"{self.slug_prefix}-{local_slug}" if self.slug_prefix else local_slug

    @property
    def title(self) -> str:
        if not self.name:
            return "as configured"
        return f"experiment={self.experiment}, {self.precision} on {self.device}"


# The study's protocols, in the order the report shows them.
PROTOCOLS = (
    Protocol("study", "study", "bf16", "cuda", "one NVIDIA H100", ""),
    Protocol("study_cpu", "study_cpu", "fp32", "cpu", "a 2-core CPU", "cpu"),
)
AS_CONFIGURED = Protocol("", None, None, None, "", "")


def protocol_settings(cfg: DictConfig) -> tuple:
    """The values of PROTOCOL_KEYS in a config (None where it lacks one)."""
    return tuple(OmegaConf.select(cfg, key, default=None) for key in PROTOCOL_KEYS)


@cache
def experiment_settings(experiment: str) -> tuple | None:
    """protocol_settings of `python scripts/train.py experiment=<experiment>`; None when the
    working directory has no such experiment config."""
    from hydra import compose, initialize_config_dir

    if not (CONFIG_DIR / "experiment" / f"{experiment}.yaml").is_file():
        return None
    with initialize_config_dir(config_dir=str(CONFIG_DIR.resolve()), version_base="1.3"):
        return protocol_settings(compose("config", overrides=[f"experiment={experiment}"]))


def device_kind(device: str | None) -> str | None:
    """metrics.json "device" (a GPU's name or cpu) as cuda | cpu; None where not recorded."""
    return None if device is None else "cpu" if device == "cpu" else "cuda"


def protocol_of(cfg: DictConfig, precision: str | None, device: str | None = None) -> Protocol:
    """The declared protocol whose experiment config has cfg's settings and whose precision and
    kind of device the run trained on (runs saved before metrics.json recorded the device are
    taken to match); a run with an experiment's settings in another precision or on another
    kind of device is its own protocol (never paired with that experiment's runs);
    AS_CONFIGURED when no experiment matches."""
    settings, kind = protocol_settings(cfg), device_kind(device)
    for protocol in PROTOCOLS:
        if experiment_settings(protocol.experiment) != settings:
            continue
        same_device = kind in (None, protocol.device_kind)
        if precision == protocol.precision and same_device:
            return protocol
        name = "_".join([protocol.name, str(precision), *([] if same_device else [kind])])
        words = device or protocol.device
        return Protocol(name, protocol.experiment, precision, kind, words, name)
    return AS_CONFIGURED
