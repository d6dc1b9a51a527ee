"""Reading raw line-aligned parallel text: two files (plain or .gz) of strict UTF-8, one sentence
a line, loaded whole or streamed, each line as text_lines gives it (no byte-order mark, Unicode
NFC); a file that cannot be read is a DataError naming it and the line. Where the Multi30k
files come from is minimt.data.multi30k's."""

from __future__ import annotations

import gzip
import hashlib
import logging
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import islice
from pathlib import Path
from typing import BinaryIO

from minimt.errors import MinimtError

log = logging.getLogger(__name__)

Pairs = tuple[list[str], list[str]]
BOM = "\ufeff"


class DataError(MinimtError):
    """A problem with the input data that the user must fix; the message says what and how."""


def read_parallel(src_path: str | Path, tgt_path: str | Path) -> Pairs:
    """Read two line-aligned files (plain or .gz), strict UTF-8; lines without their newline."""
    src, tgt = read_lines(src_path), read_lines(tgt_path)
    _check_aligned(src_path, len(src), tgt_path, len(tgt))
    return src, tgt


@dataclass(frozen=True)
class ParallelFiles:
    """Two line-aligned text files (plain or .gz), read as streams; only the first `limit` pairs,
    less the line numbers (0-based) in `skip`.

    Build it with `parallel_files`, which checks the line counts without loading the text.
    """

    src: Path
    tgt: Path
    limit: int | None
    num_pairs: int  # pairs used: min(lines, limit) - len(skip)
    skip: tuple[int, ...] = ()  # sorted

    def src_lines(self) -> Iterator[str]:
        return self._used(iter_lines(self.src))

    def tgt_lines(self) -> Iterator[str]:
        return self._used(iter_lines(self.tgt))

    def rows(self) -> Iterator[dict[str, str]]:
        """{"src": line, "tgt": line} for each pair, one at a time."""
        for src, tgt in zip(self.src_lines(), self.tgt_lines(), strict=True):
            yield {"src": src, "tgt": tgt}

    def without(self, lines: Iterable[int]) -> ParallelFiles:
        """These files with the pairs at `lines` (0-based line numbers) left out as well."""
        total = self.num_pairs + len(self.skip)  # lines before the limit
        skip = set(self.skip).union(int(line) for line in lines)
        if skip and not 0 <= min(skip) <= max(skip) < total:
            raise ValueError(f"line numbers to skip must lie in 0..{total - 1}")
        return replace(self, num_pairs=total - len(skip), skip=tuple(sorted(skip)))

    @cached_property
    def digests(self) -> dict[str, str]:
        """The SHA-256 of each file's bytes, by side ("src", "tgt")."""
        return {"src": sha256_of(self.src), "tgt": sha256_of(self.tgt)}

    @cached_property
    def fingerprint(self) -> str:
        """A digest of both files' bytes, the limit and the skipped lines: equal fingerprints,
        equal pairs."""
        parts = [self.digests["src"], self.digests["tgt"], self.limit]
        if self.skip:  # without one, the digest of files that skip nothing stays what it was
            parts.append(hashlib.sha256(repr(self.skip).encode()).hexdigest())
        return hashlib.sha256(repr(parts).encode()).hexdigest()[:16]

    def _used(self, lines: Iterator[str]) -> Iterator[str]:
        limited, skip = islice(lines, self.limit), frozenset(self.skip)
        return (line for i, line in enumerate(limited) if i not in skip) if skip else limited


def parallel_files(
    src_path: str | Path, tgt_path: str | Path, limit: int | None = None
) -> ParallelFiles:
    """Two line-aligned files, their lines counted (streamed, not loaded) and checked to match."""
    n_src, n_tgt = count_lines(src_path), count_lines(tgt_path)
    _check_aligned(src_path, n_src, tgt_path, n_tgt)
    num_pairs = n_src if limit is None else min(n_src, limit)
    return ParallelFiles(Path(src_path), Path(tgt_path), limit, num_pairs)


def read_lines(path: str | Path) -> list[str]:
    """Read a plain or gzipped text file as strict UTF-8, each line without its newline."""
    return list(iter_lines(path))


def iter_lines(path: str | Path) -> Iterator[str]:
    """Stream a plain or gzipped text file as text_lines gives it."""
    path = Path(path)
    with _open_binary(path) as file:
        yield from text_lines(_reading(path, file), str(path))


def text_lines(raw_lines: Iterable[bytes], name: str) -> Iterator[str]:
    """The one reader of text: lines of bytes (each with its newline, b"\n" or b"\r\n") as strict
    UTF-8 without the newline, a leading byte-order mark dropped (what Windows editors write) and
    each line in Unicode NFC (decomposed umlauts, as macOS and some PDFs give them, composed), so
    that the tokenizer sees one spelling of a text. How many lines either changed is logged once;
    an undecodable line is a DataError naming `name` and the line."""
    changed = 0
    for number, raw in enumerate(raw_lines, start=1):
        try:
            text = (raw[:-1].removesuffix(b"\r") if raw.endswith(b"\n") else raw).decode("utf-8")
        except UnicodeDecodeError as error:
            raise DataError(f"{name} line {number} is not valid UTF-8 ({error.reason})") from None
        clean = normalized(text, first=number == 1)
        changed += clean != text
        yield clean
    if changed:
        log.info("%s: %d line(s) normalized (byte-order mark dropped, Unicode NFC)", name, changed)


def normalized(text: str, first: bool = False) -> str:
    """`text` in Unicode NFC, without a leading byte-order mark if it is a file's `first` line."""
    if first:
        text = text.removeprefix(BOM)
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def count_lines(path: str | Path) -> int:
    """The number of lines `iter_lines` yields, counted in 1 MiB blocks."""
    path = Path(path)
    count, last = 0, b"\n"
    with _open_binary(path) as file:
        for block in _reading(path, iter(lambda: file.read(1 << 20), b"")):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")  # a last line without its newline


def sha256_of(path: Path) -> str:
    """The hex SHA-256 digest of a file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_aligned(src_path: str | Path, n_src: int, tgt_path: str | Path, n_tgt: int) -> None:
    if n_src != n_tgt:
        raise DataError(
            f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt} lines; "
            "source and target files must be line-aligned"
        )


def _open_binary(path: Path) -> BinaryIO:
    """`path` opened for reading bytes (gunzipped for .gz), or a DataError naming it."""
    try:
        return gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb")
    except FileNotFoundError:
        raise DataError(f"{path} does not exist") from None
    except OSError as error:
        raise DataError(f"cannot read {path}: {error}") from None


def _reading(path: Path, chunks: Iterable[bytes]) -> Iterator[bytes]:
    """`chunks` as read, a read error (a broken .gz too) turned into a DataError naming `path`."""
    try:
        yield from chunks
    except (OSError, EOFError, zlib.error) as error:
        raise DataError(f"cannot read {path}: {error}") from None
