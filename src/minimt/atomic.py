"""Crash-safe file writing: a file appears complete under its final name, or not at all."""

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; if the block succeeds, fsync it and rename it onto `path`.

    A crash or an exception inside the block leaves the previous file (if any) untouched and no
    partial file under the final name; the temporary file is removed on failure.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        with tmp.open("rb+") as file:
            os.fsync(file.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
