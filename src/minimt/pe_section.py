"""The config's `pe` section: which encoding each side of the model gets, with which options,
and what stops a choice from serving a model of a given size; every problem names its key."""

from __future__ import annotations

import inspect
from collections.abc import Iterable

import torch
from omegaconf import DictConfig, OmegaConf

from minimt.encoding_choice import (
    EncodingChoice,
    EncodingError,
    SidePositions,
    accepted_options,
    class_path,
    encoding_class,
)
from minimt.errors import ConfigError
from minimt.model.positions import BUILT_IN_ENCODINGS, PositionalEncoding

# The pe section: each side's encoding, each side's own options; its other keys are options of
# both sides' classes, each given to the sides whose class takes it (one that no side takes is
# an error, unless it is a built-in encoding's default: built_in_default).
SIDES = {"encoder": "encoder_options", "decoder": "decoder_options"}


def encoding_choices(pe: DictConfig) -> SidePositions:
    """The encoder's and the decoder's encoding as the `pe` section chooses them; a ConfigError
    naming the key where a class cannot be found or does not take an option."""
    problems, choices = side_choices(pe)
    if problems:
        raise ConfigError("; ".join(problems))
    return SidePositions(**choices)


def side_choices(pe: DictConfig) -> tuple[list[str], dict[str, EncodingChoice]]:
    """Each side's EncodingChoice (sides whose class cannot be found are left out) and the
    problems found: a class that cannot be imported, an option no side's class takes (or its own
    side's, in pe.encoder_options / pe.decoder_options), a value of the wrong type."""
    shared = shared_options(pe)
    problems, classes, choices = [], {}, {}
    for side in SIDES:
        name = pe.get(side)
        if not isinstance(name, str) or not name:
            problems.append(f"pe.{side}={name!r} must name an encoding: a built-in or module.Class")
            continue
        try:
            classes[side] = encoding_class(name)
        except EncodingError as error:
            problems.append(f"pe.{side}={name!r}: {error}")
    for side, cls in classes.items():
        takes = accepted_options(cls)
        options = {k: v for k, v in shared.items() if k in takes}
        options |= OmegaConf.to_container(pe.get(SIDES[side]) or OmegaConf.create({}))
        choices[side] = EncodingChoice.of(pe[side], options, cls)
        for key, why in choices[side].option_problems():
            problems.append(f"{option_key(pe, side, key)}={options[key]!r} {why} {allowed(cls)}")
    if len(classes) == len(SIDES):
        described = " or ".join(allowed(c) for c in dict.fromkeys(classes.values()))
        for key, value in untaken_options(pe, classes.values()).items():
            if built_in_default(key, value) is None:
                problems.append(f"pe.{key} is not an option of {described}")
    return problems, choices


def shared_options(pe: DictConfig) -> dict[str, object]:
    """The pe section's options for both sides: its keys but the sides and their own options."""
    return {k: v for k, v in pe.items() if k not in SIDES and k not in SIDES.values()}


def untaken_options(pe: DictConfig, classes: Iterable[type]) -> dict[str, object]:
    """The shared options set (not null) that none of `classes` takes."""
    classes = list(classes)
    return {
        key: value
        for key, value in shared_options(pe).items()
        if value is not None and not any(key in accepted_options(c) for c in classes)
    }


def ignored_options(pe: DictConfig, sides: SidePositions) -> list[str]:
    """One line per option that a pe group set for its own encoding and neither side's class
    takes (excused by built_in_default, so not an error): what the run ignores, for a warning."""
    classes = list(dict.fromkeys(choice.cls for choice in sides))
    described = " or ".join(class_path(c) for c in classes)
    return [
        f"pe.{key}={value!r}, left by pe={built_in_default(key, value)}, is not an option of "
        f"{described}: ignored"
        for key, value in untaken_options(pe, classes).items()
    ]


def built_in_default(key: str, value: object) -> str | None:
    """The built-in encoding whose default for its option `key` is `value`, else None: what a pe
    group (configs/pe) sets for its own encoding, left behind when both sides are replaced on the
    command line (`pe.encoder=my.Class pe.decoder=my.Class`), where it changes nothing."""
    for name, cls in BUILT_IN_ENCODINGS.items():
        parameter = inspect.signature(cls.__init__).parameters.get(key)
        if parameter is not None and parameter.default == value:
            return name
    return None


def option_key(pe: DictConfig, side: str, option: str) -> str:
    """The config key that gave `side` its `option`: its own pe.<side>_options.KEY, or pe.KEY."""
    own = pe.get(SIDES[side]) or {}
    return f"pe.{SIDES[side]}.{option}" if option in own else f"pe.{option}"


def allowed(cls: type) -> str:
    """`module.Class (options: a, b)` or `module.Class (no options)`."""
    names = ", ".join(accepted_options(cls))
    return f"{class_path(cls)} ({f'options: {names}' if names else 'no options'})"


def encoding_problems(cfg: DictConfig, choices: dict[str, EncodingChoice]) -> list[str]:
    """What stops each side's encoding, as side_choices read it from cfg.pe, from serving this
    model: the class's `problem(d_model, n_heads)` and any exception its constructor raises,
    built on the CPU without touching the random streams (not on the meta device: its first
    float64 arange imports torch._dynamo, a slow start for every script)."""
    problems = []
    max_seq_len, d_model, n_heads = cfg.model.max_seq_len, cfg.model.d_model, cfg.model.n_heads
    sides: dict[EncodingChoice, list[str]] = {}
    for side, choice in choices.items():
        sides.setdefault(choice, []).append(side)
    for choice, named in sides.items():
        where = f"pe={choice.name} ({', '.join(f'pe.{side}' for side in named)})"
        problem = choice.cls.problem(d_model, n_heads)
        if problem:
            problems.append(
                f"{where} {problem}: model.d_model / model.n_heads = {d_model} / {n_heads}"
            )
            continue
        with torch.random.fork_rng(devices=[]), torch.device("cpu"):
            try:
                module = choice(max_seq_len, d_model, n_heads)
            except Exception as error:  # the class's own check of its options, in its words
                given = (f"{option_key(cfg.pe, named[0], k)}={v!r}" for k, v in choice.options)
                options = ", ".join(given) or "no options"
                problems.append(f"{where} with {options}: {class_path(choice.cls)} says {error}")
                continue
            problems += contract_problems(module, d_model, n_heads)
    return problems


# What a signature that takes every call the model makes looks like, per overridable method.
SIGNATURES = {
    "add": "add(self, x, offset)",
    "rotate": "rotate(self, x, offset)",
    "bias": "bias(self, n_queries, n_keys, offset=0, causal=False, *, device=None)",
}


def model_calls(d_model: int, n_heads: int) -> dict[str, list[tuple[str, tuple, dict]]]:
    """How the model calls each method a PositionalEncoding may override (minimt.model.embedding,
    minimt.model.transformer), on two positions: (the call in words, its arguments, keywords)."""
    head = d_model // n_heads
    return {
        "add": [("add(x, offset)", (torch.zeros(1, 2, d_model), 1), {})],
        "rotate": [("rotate(x, offset)", (torch.zeros(1, n_heads, 2, head), 1), {})],
        "bias": [
            ("bias(n_queries, n_keys, device=...)", (2, 2), {"device": "cpu"}),
            (
                "bias(n_queries, n_keys, causal=True, device=...)",
                (2, 2),
                {"causal": True, "device": "cpu"},
            ),
            ("bias(1, n_keys, offset=..., device=...)", (1, 3), {"offset": 2, "device": "cpu"}),
        ],
    }


def contract_problems(module: PositionalEncoding, d_model: int, n_heads: int) -> list[str]:
    """What stops the model from calling `module`'s overridden methods: a signature that cannot
    take a call the model makes, or an exception when it is called so on a tiny input."""
    cls = type(module)
    overridden = {"add": module.adds, "rotate": module.rotates, "bias": module.biases}
    for method, calls in model_calls(d_model, n_heads).items():
        if not overridden[method]:
            continue
        for call, args, kwargs in calls:
            try:
                inspect.signature(getattr(cls, method)).bind(module, *args, **kwargs)
            except TypeError as error:
                return [
                    f"{class_path(cls)}.{method} cannot take the model's call {call} ({error}): "
                    f"give it the signature {SIGNATURES[method]}"
                ]
            try:
                getattr(module, method)(*args, **kwargs)
            except Exception as error:  # the class's own code, on a tiny input
                return [
                    f"{class_path(cls)}.{method} fails on the model's call {call} on a tiny "
                    f"input on the CPU: {type(error).__name__}: {error}"
                ]
    return []
