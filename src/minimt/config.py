"""What each config key means, in one place: its rules (checked before any work starts, with
messages that name the key; a key that no rule knows is refused), the keys a checkpoint depends
on, and the model a config builds. The `pe` section's keys name classes and their options:
minimt.pe_section checks those."""

from __future__ import annotations

import difflib
import logging
from collections.abc import Collection

from omegaconf import DictConfig, OmegaConf

from minimt.checkpoint import config_mismatches, run_dir_of
from minimt.data.length_split import AS_LENGTH_SPLIT
from minimt.data.tokenizer import MIN_VOCAB_SIZE, PAD_ID
from minimt.encoding_choice import EncodingChoice, SidePositions
from minimt.errors import ConfigError
from minimt.model.transformer import Transformer
from minimt.pe_section import encoding_choices, encoding_problems, ignored_options, side_choices
from minimt.rules import (
    Rule,
    at_least,
    betas,
    boolean,
    language,
    location,
    non_negative_int,
    non_negative_number,
    number,
    one_of,
    optional,
    optional_positive_int,
    optional_positive_number,
    path,
    positive_int,
    positive_int_list,
    positive_number,
    probability,
    split_names,
)
from minimt.runtime import parallel_jobs

log = logging.getLogger("minimt")

# What a checkpoint's weights depend on: a model built with other values cannot load them.
ARCHITECTURE_KEYS = (
    "model.d_model",
    "model.n_heads",
    "model.n_encoder_layers",
    "model.n_decoder_layers",
    "model.d_ff",
    "model.max_seq_len",
    "model.norm_first",
    "embedding.scale",
    "embedding.share",
    "tokenizer.vocab_size",
    "tokenizer.joint",
)


# Settings a resumed run must share with its checkpoint: the weights, the data and its order
# (and every key of the `pe` section, whatever the encoding's options: resume_mismatches).
RESUME_KEYS = (
    *ARCHITECTURE_KEYS,
    "embedding.init_std",
    "data.name",
    "data.src_lang",
    "data.tgt_lang",
    "data.max_train_pairs",
    "data.train_max_words",
    "data.long_tests_over",
    "data.train_subsample",
    "data.max_train_len",
    "trainer.seed",
    "trainer.batch_tokens",
)


# embedding.share: tying level -> (share_embeddings, tie_output)
SHARE_LEVELS = {"none": (False, False), "decoder": (False, True), "all": (True, True)}


def share_level(v: object) -> str | None:
    if isinstance(v, str) and v in SHARE_LEVELS:
        return None
    was = (
        " (true / false are no levels: true was all, false decoder)" if isinstance(v, bool) else ""
    )
    return f"must be one of none, decoder, all{was}"


def subsample_size(v: object) -> str | None:
    if v == AS_LENGTH_SPLIT or optional_positive_int(v) is None:
        return None
    return f"must be null, an integer >= 1 or {AS_LENGTH_SPLIT} (as many pairs as the length split)"


RULES: dict[str, Rule] = {
    "resume": lambda v: None if v is None or path(v) is None else "must be a path or null",
    "views": boolean,
    "resume_new_data": boolean,
    "embedding.scale": boolean,
    "embedding.share": share_level,
    "embedding.init_std": optional_positive_number,
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
    "data.name": one_of(("multi30k", "parallel_text")),
    "data.url": location,
    "data.dir": path,
    "data.src_lang": language,
    "data.tgt_lang": language,
    **{
        f"data.{split}.{side}": path
        for split in ("train", "val", "test")
        for side in ("src", "tgt")
    },
    "data.test_sets": optional(split_names),  # parallel_text has one test set, "test"
    "data.max_train_len": positive_int,
    "data.max_train_pairs": optional_positive_int,
    "data.max_val_pairs": optional_positive_int,
    "data.train_max_words": optional_positive_int,
    "data.long_tests_over": optional_positive_int,
    "data.long_bucket_edges": lambda v: (
        positive_int_list(v) or (None if list(v) == sorted(set(v)) else "must be increasing")
    ),
    "data.train_subsample": subsample_size,
    "trainer.device": one_of(("auto", "cpu", "cuda")),
    "trainer.precision": one_of(("auto", "bf16", "fp32")),
    "trainer.seed": number(lambda v: isinstance(v, int), "an integer"),
    "trainer.betas": betas,
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
    "trainer.patience": optional_positive_int,
    "trainer.min_delta": non_negative_number,
    "trainer.average_last": optional(at_least(2)),
    "trainer.adapt": boolean,
    "trainer.adapt_min_updates": positive_int,
    "trainer.adapt_dropout": probability,
    "trainer.adapt_average": number(lambda v: 0 < v <= 1, "a number in (0, 1]"),
    "trainer.num_threads": optional_positive_int,
    "trainer.adam_impl": one_of(("fused", "foreach", "for_loop")),
    "trainer.compile": boolean,
    "trainer.prefetch": non_negative_int,
    "decoding.max_len_a": non_negative_number,
    "decoding.max_len_b": positive_int,
    "decoding.test_beam": positive_int,
    "decoding.length_penalty": non_negative_number,
}


# The RULES keys of one data source (configs/data) alone: no setting under another.
SOURCE_KEYS = {
    "multi30k": ("data.url",),
    "parallel_text": tuple(
        k for k in RULES if k.startswith(("data.train.", "data.val.", "data.test."))
    ),
}
# Sections no RULES key names: the pe section's options (minimt.pe_section checks them against
# their classes) and Hydra's own settings.
UNCHECKED_SECTIONS = ("pe", "hydra")


def source_keys(cfg: DictConfig) -> list[str]:
    """The RULES keys that cfg's data source reads: all but the other sources' own (every
    source's own where data.name names none)."""
    name = cfg.data.get("name")
    others = {k for source, keys in SOURCE_KEYS.items() if source != name for k in keys}
    return [key for key in RULES if key not in others]


def check_known_keys(cfg: DictConfig, own_sections: Collection[str] = ()) -> None:
    """Raise ConfigError naming every key of `cfg` that no rule knows (one added with `+`, which
    nothing would read), each with the nearest known key; `own_sections`: top-level sections
    the calling script reads itself."""
    name = cfg.data.get("name")  # where it names no source, its own rule says so
    known = source_keys(cfg) if isinstance(name, str) and name in SOURCE_KEYS else list(RULES)
    unchecked = (*UNCHECKED_SECTIONS, *own_sections)
    unknown = [
        key
        for key in dotted_keys(OmegaConf.to_container(cfg))
        if key not in known and key.split(".")[0] not in unchecked
    ]
    if unknown:
        problems = "; ".join(unknown_key_problem(key, known, cfg) for key in unknown)
        raise ConfigError(f"{problems}; python scripts/train.py --help lists every setting")


def unknown_key_problem(key: str, known: list[str], cfg: DictConfig) -> str:
    """`KEY is no setting of ...`, with the data source that reads it or the nearest known key."""
    if key in RULES:  # another data source's
        (source,) = [name for name, keys in SOURCE_KEYS.items() if key in keys]
        return f"{key} is no setting of data={cfg.data.name} (only data={source} reads it)"
    near = difflib.get_close_matches(key, known, n=1)
    return f"{key} is no setting of minimt" + (f" (did you mean {near[0]}?)" if near else "")


def dotted_keys(tree: object, prefix: str = "") -> list[str]:
    """The dotted key of every value in a nested dict (a null or missing one too; an empty dict
    is a value)."""
    if not isinstance(tree, dict) or not tree:
        return [prefix]
    return [
        key
        for name, value in tree.items()
        for key in dotted_keys(value, f"{prefix}.{name}" if prefix else str(name))
    ]


def validate_config(cfg: DictConfig, own_sections: Collection[str] = ()) -> SidePositions:
    """Raise ConfigError naming every key that no rule knows (check_known_keys; `own_sections`:
    the calling script's own), else listing every bad value in `cfg` (all at once, so one
    fix-up round); else return the encoder's and the decoder's positions as the checked `pe`
    section chose them, for build_model (the section is read once)."""
    check_known_keys(cfg, own_sections)
    missing = sorted(OmegaConf.missing_keys(cfg))
    problems = [f"{key} must be set (it has no default)" for key in missing]
    for key in [key for key in source_keys(cfg) if key not in missing]:
        value = OmegaConf.select(cfg, key, throw_on_missing=False)
        problem = RULES[key](value)
        if problem:
            problems.append(f"{key}={value!r} {problem}")
    if not problems:  # the checks across keys need each key's own value to be sound
        section_problems, choices = side_choices(cfg.pe)
        problems = _cross_key_problems(cfg, section_problems, choices)
    if problems:
        raise ConfigError("bad config value(s):\n  " + "\n  ".join(problems))
    sides = SidePositions(**choices)
    for line in ignored_options(cfg.pe, sides):
        log.warning(line)
    return sides


def _cross_key_problems(
    cfg: DictConfig, section_problems: list[str], choices: dict[str, EncodingChoice]
) -> list[str]:
    """The problems across keys; the pe section's own (side_choices) where d_model / n_heads let
    its encodings be checked against the model."""
    problems = []
    share = cfg.embedding.share
    if share == "all" and not cfg.tokenizer.joint:
        problems.append(
            f"embedding.share={share} needs tokenizer.joint=true: tying source, "
            "target and output tables needs one vocabulary (or set embedding.share=decoder or none)"
        )
    if cfg.data.train_subsample == AS_LENGTH_SPLIT and cfg.data.long_tests_over is None:
        problems.append(
            f"data.train_subsample={AS_LENGTH_SPLIT} needs data.long_tests_over=N: the size of "
            "the length split at N words (or give data.train_subsample a number)"
        )
    d_model, n_heads = cfg.model.d_model, cfg.model.n_heads
    if d_model % n_heads:
        problems.append(f"model.d_model={d_model} must be divisible by model.n_heads={n_heads}")
    else:
        problems += section_problems or encoding_problems(cfg, choices)
    if cfg.data.max_train_len + 1 > cfg.model.max_seq_len:
        problems.append(
            f"data.max_train_len={cfg.data.max_train_len} needs model.max_seq_len >= "
            f"{cfg.data.max_train_len + 1} (room for <bos>/<eos>), got {cfg.model.max_seq_len}"
        )
    test_beam, vocab_size = cfg.decoding.test_beam, cfg.tokenizer.vocab_size
    if 2 * test_beam > vocab_size:  # what beam search needs (minimt.model.search.beam_search)
        problems.append(
            f"decoding.test_beam={test_beam} needs a target vocabulary of at least "
            f"{2 * test_beam} tokens (beam search ranks 2 x beam extensions a step), but "
            f"tokenizer.vocab_size={vocab_size}: lower decoding.test_beam to {vocab_size // 2} "
            "or raise tokenizer.vocab_size"
        )
    average_last, keep = cfg.trainer.average_last, cfg.trainer.keep_checkpoints
    if average_last is not None and average_last > keep:
        problems.append(
            f"trainer.average_last={average_last} averages the last {average_last} step "
            f"checkpoints, but trainer.keep_checkpoints={keep} keeps only {keep}: raise "
            f"trainer.keep_checkpoints to {average_last} or lower trainer.average_last"
        )
    if cfg.trainer.adapt and average_last is not None:
        problems.append(
            f"trainer.adapt=true averages the last trainer.adapt_average of the updates itself, "
            f"besides trainer.average_last={average_last}: set trainer.average_last=null or "
            "trainer.adapt=false"
        )
    return problems


def register_resolvers() -> None:
    """`${minimt.run_dir:${resume},NEW}` (configs/config.yaml): a resumed run keeps its folder;
    `${minimt.inverse_sqrt:${model.d_model}}`: d_model^-0.5, for settings given relative to it;
    `${minimt.parallel_jobs:GB}`: the runs this machine holds at once (runtime.parallel_jobs)."""
    if not OmegaConf.has_resolver("minimt.run_dir"):
        OmegaConf.register_new_resolver(
            "minimt.run_dir", lambda resume, new: str(run_dir_of(resume)) if resume else new
        )
    if not OmegaConf.has_resolver("minimt.inverse_sqrt"):
        OmegaConf.register_new_resolver("minimt.inverse_sqrt", lambda n: float(n) ** -0.5)
    if not OmegaConf.has_resolver("minimt.parallel_jobs"):  # hydra/launcher=parallel_auto
        OmegaConf.register_new_resolver(
            "minimt.parallel_jobs", lambda gb: parallel_jobs(float(gb)), use_cache=True
        )


def resume_mismatches(saved: dict, cfg: DictConfig) -> list[str]:
    """The RESUME_KEYS and keys of the `pe` section whose values differ between a saved config
    and cfg."""
    saved_cfg = OmegaConf.create(saved)
    pe_keys = dict.fromkeys(leaf_keys(saved_cfg.get("pe"), "pe") + leaf_keys(cfg.get("pe"), "pe"))
    return config_mismatches(saved_cfg, cfg, (*RESUME_KEYS, *pe_keys))


def changed_settings(saved: dict, cfg: DictConfig) -> list[str]:
    """`key: checkpoint X, config Y` for every other saved or configured key whose value differs
    from the checkpoint's (what resuming continues with, named): all but `resume` and the keys
    resume_mismatches refuses."""
    saved_cfg = OmegaConf.create(saved)
    refused = {*RESUME_KEYS, *leaf_keys(saved_cfg.get("pe"), "pe"), *leaf_keys(cfg.get("pe"), "pe")}
    keys = dict.fromkeys(leaf_keys(saved_cfg, "") + leaf_keys(cfg, ""))
    return config_mismatches(
        saved_cfg, cfg, tuple(k for k in keys if k not in {*refused, "resume"})
    )


def leaf_keys(node: object, prefix: str) -> list[str]:
    """The dotted keys of every leaf under `node` (a config section), `prefix` first."""
    if not isinstance(node, DictConfig):
        return [prefix] if node is not None else []
    return [
        key
        for name in node
        for key in leaf_keys(node.get(name), f"{prefix}.{name}" if prefix else str(name))
    ]


def build_model(
    cfg: DictConfig,
    src_vocab_size: int,
    tgt_vocab_size: int,
    positions: SidePositions | None = None,
) -> Transformer:
    """The model a config describes: the one place where config keys become the model's
    arguments (and the only place a name changes). `positions`: the encoder's and decoder's
    positions validate_config returned for `cfg`; without them (a saved run's config) they are
    read from cfg.pe."""
    share_embeddings, tie_output = SHARE_LEVELS[cfg.embedding.share]
    sides = positions or encoding_choices(cfg.pe)
    model = cfg.model
    return Transformer(
        src_vocab_size,
        tgt_vocab_size,
        d_model=model.d_model,
        n_heads=model.n_heads,
        n_encoder_layers=model.n_encoder_layers,
        n_decoder_layers=model.n_decoder_layers,
        d_ff=model.d_ff,
        max_seq_len=model.max_seq_len,
        dropout=model.dropout,
        attention_dropout=model.attention_dropout,
        norm_first=model.norm_first,
        pad_id=PAD_ID,
        tie_output=tie_output,
        src_positions=sides.encoder,
        tgt_positions=sides.decoder,
        scale_embedding=cfg.embedding.scale,
        share_embeddings=share_embeddings,
        init_std=cfg.embedding.init_std,
    )
