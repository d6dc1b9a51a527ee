"""What each config key means, in one place: its rules (checked before any work starts, with
messages that name the key), the keys a checkpoint depends on, and the model a config builds."""

from __future__ import annotations

from collections.abc import Callable

from omegaconf import DictConfig, ListConfig, OmegaConf

from minimt.checkpoint import run_dir_of
from minimt.data.tokenizer import MIN_VOCAB_SIZE, PAD_ID
from minimt.model.embedding import POSITIONAL_ENCODINGS
from minimt.model.transformer import Transformer

# What a checkpoint's weights depend on: a model built with other values cannot load them.
ARCHITECTURE_KEYS = (
    "model.d_model",
    "model.n_heads",
    "model.n_encoder_layers",
    "model.n_decoder_layers",
    "model.d_ff",
    "model.max_seq_len",
    "model.norm_first",
    "pe.name",
    "embedding.scale",
    "embedding.share",
    "tokenizer.vocab_size",
    "tokenizer.joint",
)


# Settings a resumed run must share with its checkpoint: the weights, the data and its order.
RESUME_KEYS = (
    *ARCHITECTURE_KEYS,
    "data.name",
    "data.src_lang",
    "data.tgt_lang",
    "data.max_train_pairs",
    "data.max_train_len",
    "trainer.seed",
    "trainer.batch_tokens",
)


class ConfigError(ValueError):
    """A config value that cannot work; the message names the key and the allowed values."""


Rule = Callable[[object], str | None]


def one_of(*choices: str) -> Rule:
    return lambda v: None if v in choices else f"must be one of {', '.join(choices)}"


def boolean(v: object) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def at_least(minimum: int) -> Rule:
    def rule(v: object) -> str | None:
        ok = isinstance(v, int) and not isinstance(v, bool) and v >= minimum
        return None if ok else f"must be an integer >= {minimum}"

    return rule


positive_int = at_least(1)
non_negative_int = at_least(0)


def optional_positive_int(v: object) -> str | None:
    return None if v is None else positive_int(v)


def positive_int_list(v: object) -> str | None:
    ok = isinstance(v, ListConfig | list) and all(positive_int(x) is None for x in v)
    return None if ok else "must be a list of integers >= 1 (may be empty)"


def positive_number(v: object) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v > 0
    return None if ok else "must be a positive number"


def non_negative_number(v: object) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and v >= 0
    return None if ok else "must be a number >= 0"


def probability(v: object) -> str | None:
    ok = isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1
    return None if ok else "must be a number in [0, 1)"


RULES: dict[str, Rule] = {
    "resume": lambda v: None if v is None or isinstance(v, str) else "must be a path or null",
    "views": boolean,
    "pe.name": one_of(*POSITIONAL_ENCODINGS),
    "embedding.scale": boolean,
    "embedding.share": boolean,
    "tokenizer.joint": boolean,
    # byte-level BPE: 4 special tokens + 256 byte symbols before any merge
    "tokenizer.vocab_size": at_least(MIN_VOCAB_SIZE),
    "model.d_model": positive_int,
    "model.n_heads": positive_int,
    "model.n_encoder_layers": positive_int,
    "model.n_decoder_layers": positive_int,
    "model.d_ff": positive_int,
    "model.dropout": probability,
    "model.attention_dropout": probability,
    "model.max_seq_len": positive_int,
    "model.norm_first": boolean,
    "data.max_train_len": positive_int,
    "data.max_train_pairs": optional_positive_int,
    "data.max_val_pairs": optional_positive_int,
    "trainer.device": one_of("auto", "cpu", "cuda"),
    "trainer.precision": one_of("auto", "bf16", "fp32"),
    "trainer.seed": lambda v: None if isinstance(v, int) else "must be an integer",
    "trainer.lr": positive_number,
    "trainer.warmup_steps": positive_int,
    "trainer.weight_decay": non_negative_number,
    "trainer.label_smoothing": probability,
    "trainer.clip_grad_norm": non_negative_number,
    "trainer.batch_tokens": positive_int,
    "trainer.accumulate": positive_int,
    "trainer.max_nonfinite_steps": positive_int,
    "trainer.max_steps": positive_int,
    "trainer.max_epochs": positive_int,
    "trainer.max_minutes": positive_number,
    "trainer.val_every": positive_int,
    "trainer.log_every": positive_int,
    "trainer.save_every": positive_int,
    "trainer.keep_checkpoints": positive_int,
    "trainer.num_threads": optional_positive_int,
    "trainer.adam_impl": one_of("fused", "foreach", "for_loop"),
    "trainer.compile": boolean,
    "trainer.prefetch": non_negative_int,
    "decoding.max_len_a": non_negative_number,
    "decoding.max_len_b": positive_int,
    "decoding.test_beam": positive_int,
    "decoding.length_penalty": non_negative_number,
    "decoding.long_inputs": positive_int_list,
}


def validate_config(cfg: DictConfig) -> None:
    """Raise ConfigError listing every bad value in `cfg` (all at once, so one fix-up round)."""
    problems = [
        f"{key} must be set (it has no default)" for key in sorted(OmegaConf.missing_keys(cfg))
    ]
    for key, rule in RULES.items():
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        problem = rule(value)
        if problem:
            problems.append(f"{key}={value!r} {problem}")
    if not problems:  # the checks across keys need each key's own value to be sound
        problems = _cross_key_problems(cfg)
    if problems:
        raise ConfigError("bad config value(s):\n  " + "\n  ".join(problems))


def _cross_key_problems(cfg: DictConfig) -> list[str]:
    problems = []
    if cfg.embedding.share and not cfg.tokenizer.joint:
        problems.append(
            "embedding.share=true needs tokenizer.joint=true: tying source, target and output "
            "tables needs one vocabulary (or set embedding.share=false)"
        )
    if cfg.model.d_model % cfg.model.n_heads:
        problems.append(
            f"model.d_model={cfg.model.d_model} must be divisible by "
            f"model.n_heads={cfg.model.n_heads}"
        )
    elif cfg.pe.name == "rope" and (cfg.model.d_model // cfg.model.n_heads) % 2:
        problems.append(
            f"pe=rope rotates pairs of dimensions, so the head size model.d_model / model.n_heads "
            f"must be even, got {cfg.model.d_model} / {cfg.model.n_heads}"
        )
    if cfg.data.max_train_len + 1 > cfg.model.max_seq_len:
        problems.append(
            f"data.max_train_len={cfg.data.max_train_len} needs model.max_seq_len >= "
            f"{cfg.data.max_train_len + 1} (room for <bos>/<eos>), got {cfg.model.max_seq_len}"
        )
    return problems


def register_resolvers() -> None:
    """`${minimt.run_dir:${resume},NEW}` (configs/config.yaml): a resumed run keeps its folder."""
    if not OmegaConf.has_resolver("minimt.run_dir"):
        OmegaConf.register_new_resolver(
            "minimt.run_dir", lambda resume, new: str(run_dir_of(resume)) if resume else new
        )


def build_model(cfg: DictConfig, src_vocab_size: int, tgt_vocab_size: int) -> Transformer:
    """The model a config describes; the one place where config becomes a model."""
    m = cfg.model
    return Transformer(
        src_vocab_size,
        tgt_vocab_size,
        d_model=m.d_model,
        n_heads=m.n_heads,
        n_encoder_layers=m.n_encoder_layers,
        n_decoder_layers=m.n_decoder_layers,
        d_ff=m.d_ff,
        dropout=m.dropout,
        attention_dropout=m.attention_dropout,
        max_seq_len=m.max_seq_len,
        pad_id=PAD_ID,
        pos_encoding=cfg.pe.name,
        scale_embedding=cfg.embedding.scale,
        share_embeddings=cfg.embedding.share,
        norm_first=m.norm_first,
    )
