"""One side's positional encoding as a config chooses it: a built-in name or the import path
of a PositionalEncoding subclass, with its options, checked against the class's signature
before anything is built. The model receives the choice as its factory of positions."""

from __future__ import annotations

import importlib
import inspect
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from minimt.model.positions import BUILT_IN_ENCODINGS, PositionalEncoding

CONSTRUCTOR_ARGUMENTS = ("max_seq_len", "d_model", "n_heads")  # given by the model, not options


class EncodingError(ValueError):
    """An encoding that cannot be imported, is not a PositionalEncoding, or does not take the
    options given; the message says what and how to fix it (the caller names the config key)."""


def encoding_class(name: str) -> type[PositionalEncoding]:
    """The class a built-in name or a dotted import path (`my_encodings.T5Bias`) names. Importing
    its module runs that module's code, as any plugin does; a path that is not a
    PositionalEncoding subclass is refused before anything of it is called."""
    if name in BUILT_IN_ENCODINGS:
        return BUILT_IN_ENCODINGS[name]
    module_name, _, class_name = name.rpartition(".")
    if not module_name or not class_name:
        raise EncodingError(
            f"{name!r} is neither a built-in encoding ({', '.join(BUILT_IN_ENCODINGS)}) nor the "
            "import path of a class (module.Class)"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise EncodingError(
            f"cannot import {module_name} for {name} ({error}): put the folder that holds it on "
            "PYTHONPATH, or name a built-in encoding"
        ) from None
    found = getattr(module, class_name, None)
    if found is None:
        raise EncodingError(f"{module_name} has no {class_name}: check the spelling of {name}")
    if not (isinstance(found, type) and issubclass(found, PositionalEncoding)):
        raise EncodingError(
            f"{name} is not a subclass of minimt.model.positions.PositionalEncoding, so it "
            "cannot serve as a positional encoding"
        )
    return found


def class_path(cls: type) -> str:
    """`module.Class`: how a run records the class it used."""
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class EncodingChoice:
    """One side's positional encoding: `name`, a built-in (positions.BUILT_IN_ENCODINGS) or a
    class's import path, the class it names (resolved once, by `of`), and `options`, keyword
    arguments of that class as sorted (key, value) pairs. Called with the model's sizes it builds
    the encoding: it is the factory the model takes. Equal choices (name and options) are equal
    factories, so sides with equal choices share one module."""

    name: str
    cls: type[PositionalEncoding] = field(compare=False, repr=False)
    options: tuple[tuple[str, object], ...] = ()

    @classmethod
    def of(
        cls,
        name: str,
        options: Mapping[str, object] | None = None,
        encoding: type[PositionalEncoding] | None = None,
    ) -> EncodingChoice:
        """The choice of `name` with `options` (a null option keeps the class's default);
        `encoding` is the class `name` names where the caller has already found it."""
        kept = {key: value for key, value in (options or {}).items() if value is not None}
        found = encoding_class(name) if encoding is None else encoding
        return cls(name, found, tuple(sorted(kept.items())))

    def option_problems(self) -> list[tuple[str, str]]:
        """(option, why) for each option the class's signature does not take or whose value is
        not of the type its annotation names."""
        parameters = accepted_options(self.cls)
        problems = []
        for key, value in self.options:
            if key not in parameters:
                problems.append((key, "is not an option of"))
            elif not value_fits(value, parameters[key]):
                problems.append((key, f"must be {annotation_text(parameters[key])} for"))
        return problems

    def __call__(self, max_seq_len: int, d_model: int, n_heads: int) -> PositionalEncoding:
        """The encoding for a model of these sizes."""
        return self.cls(max_seq_len, d_model, n_heads, **dict(self.options))


class SidePositions(NamedTuple):
    """The encoder's and the decoder's positions, each side's choice of the pe section."""

    encoder: EncodingChoice
    decoder: EncodingChoice


def accepted_options(cls: type[PositionalEncoding]) -> dict[str, object]:
    """The keyword options `cls` takes, each with its annotation (inspect.Parameter.empty: none)."""
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation naming what the module imports only for type checkers
        hints = {}
    parameters = inspect.signature(cls.__init__).parameters
    return {
        name: hints.get(name, inspect.Parameter.empty)
        for name, parameter in parameters.items()
        if name != "self"
        and name not in CONSTRUCTOR_ARGUMENTS
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    }


def value_fits(value: object, annotation: object) -> bool:
    """Whether a config value suits an annotation: bool, int, float (an int too), str, a union
    of them, or anything where there is no annotation or one this check does not read."""
    if annotation in (inspect.Parameter.empty, typing.Any, object):
        return True
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return any(value_fits(value, arm) for arm in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation in (bool, str):
        return isinstance(value, annotation)
    return True


def annotation_text(annotation: object) -> str:
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return " or ".join(annotation_text(arm) for arm in typing.get_args(annotation))
    return "null" if annotation is type(None) else names.get(annotation, str(annotation))
