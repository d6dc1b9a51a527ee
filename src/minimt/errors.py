"""The errors a user can fix (config, data, run directory, checkpoint, disk).

Each message says what went wrong, naming the file or key, and what to do; a script ends on one
with that message as one line (`minimt.cli.one_line_errors`). Any other exception is a bug and
keeps its traceback.
"""

from collections.abc import Callable, Iterator
from contextlib import contextmanager


class MinimtError(Exception):
    """A problem the user can fix; the message alone says what and how."""


class ConfigError(MinimtError, ValueError):
    """A config value that cannot work; the message names the key and the allowed values."""


class NotFound(MinimtError, FileNotFoundError):
    """A file or directory the user named (a run, a checkpoint, a tokenizer) that is not there."""


@contextmanager
def with_hint(hint: str | Callable[[], str], *kinds: type[MinimtError]) -> Iterator[None]:
    """Inside, an error of `kinds` gets `; <hint>` added (a callable is asked only then): what a
    failure left intact, or what to do next, so that the one line a script ends on says it."""
    try:
        yield
    except kinds as error:
        raise type(error)(f"{error}; {hint() if callable(hint) else hint}") from error
