"""What a config value must be: each rule takes a value and returns None, or what is wrong with
it in words that follow `key=value` ("must be a positive number"). minimt.config maps each key
to its rule; the scripts check their own arguments with the same rules."""

from __future__ import annotations

from collections.abc import Callable, Collection

from omegaconf import ListConfig

Rule = Callable[[object], str | None]


def one_of(choices: Collection[str]) -> Rule:
    """A value in `choices`."""
    return lambda v: None if v in list(choices) else f"must be one of {', '.join(choices)}"


def boolean(v: object) -> str | None:
    return None if isinstance(v, bool) else "must be true or false"


def number(accepts: Callable[[float], bool], what: str) -> Rule:
    """An int or float (never a bool) that `accepts` takes."""

    def rule(v: object) -> str | None:
        ok = isinstance(v, int | float) and not isinstance(v, bool) and accepts(v)
        return None if ok else f"must be {what}"

    return rule


def at_least(minimum: int) -> Rule:
    return number(lambda v: isinstance(v, int) and v >= minimum, f"an integer >= {minimum}")


def optional(rule: Rule) -> Rule:
    """`rule`, or null."""
    return lambda v: None if v is None else rule(v)


positive_int = at_least(1)
non_negative_int = at_least(0)
optional_positive_int = optional(positive_int)
positive_number = number(lambda v: v > 0, "a positive number")
optional_positive_number = optional(positive_number)
non_negative_number = number(lambda v: v >= 0, "a number >= 0")
probability = number(lambda v: 0 <= v < 1, "a number in [0, 1)")


def path(v: object) -> str | None:
    return None if isinstance(v, str) and v else "must be a path"


def location(v: object) -> str | None:
    return None if isinstance(v, str) and v else "must be a folder, file:// or https:// URL"


def language(v: object) -> str | None:
    return None if isinstance(v, str) and v else "must be a language's name, e.g. de"


def betas(v: object) -> str | None:
    ok = isinstance(v, ListConfig | list) and len(v) == 2 and not any(map(probability, v))
    return None if ok else "must be [beta1, beta2], each a number in [0, 1)"


def split_names(v: object) -> str | None:
    ok = isinstance(v, ListConfig | list) and all(isinstance(x, str) and x for x in v)
    return None if ok else "must be a list of split names, e.g. [test_2016_flickr] (may be empty)"


def positive_int_list(v: object) -> str | None:
    ok = isinstance(v, ListConfig | list) and all(positive_int(x) is None for x in v)
    return None if ok else "must be a list of integers >= 1 (may be empty)"
