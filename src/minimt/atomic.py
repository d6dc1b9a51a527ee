"""Crash-safe file writing: a file appears complete under its final name, or not at all."""

import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

TEMP_SUFFIX = ".tmp"


@contextmanager
def atomic_write(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside `path`; if the block succeeds, fsync it and rename it onto `path`.

    A crash or an exception inside the block leaves the previous file (if any) untouched and no
    partial file under the final name; the temporary file is removed on failure (after kill -9
    it stays behind as a hidden .tmp file, which `remove_temp_files` clears).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}{TEMP_SUFFIX}")
    try:
        yield tmp
        with tmp.open("rb+") as file:
            os.fsync(file.fileno())
        os.replace(tmp, path)
        _fsync_directory(path.parent)  # makes the rename itself survive a power loss
    finally:
        tmp.unlink(missing_ok=True)


def remove_temp_files(folder: str | Path) -> list[Path]:
    """Delete the temp files that interrupted atomic writes left in `folder`; return them."""
    leftovers = list(Path(folder).glob(f".*{TEMP_SUFFIX}"))
    for path in leftovers:
        path.unlink(missing_ok=True)
    return leftovers


def _fsync_directory(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
