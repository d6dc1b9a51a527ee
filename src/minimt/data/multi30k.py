"""Fetching and verifying the official Multi30k task-1 raw files (a folder, file:// or http(s)).

Every file is pinned by its SHA-256, so an edited upstream file is an error, never a silently
different corpus; files reach the cache only complete and verified."""

from __future__ import annotations

import logging
import shutil
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from minimt.atomic import WriteError, atomic_write, is_write_fault, only_a_write_fails
from minimt.data.corpus import DataError, Pairs, read_parallel, sha256_of
from minimt.errors import with_hint

logger = logging.getLogger(__name__)

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"

# Every file of the official raw folder: a split/language pair exists exactly when it is listed.
MULTI30K_SHA256 = {
    "test_2016_flickr.cs.gz": "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1",
    "test_2016_flickr.de.gz": "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8",
    "test_2016_flickr.en.gz": "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9",
    "test_2016_flickr.fr.gz": "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90",
    "test_2017_flickr.de.gz": "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee",
    "test_2017_flickr.en.gz": "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074",
    "test_2017_flickr.fr.gz": "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496",
    "test_2017_mscoco.de.gz": "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338",
    "test_2017_mscoco.en.gz": "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58",
    "test_2017_mscoco.fr.gz": "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0",
    "test_2018_flickr.cs.gz": "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2",
    "test_2018_flickr.de.gz": "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608",
    "test_2018_flickr.en.gz": "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d",
    "test_2018_flickr.fr.gz": "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501",
    "train.cs.gz": "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077",
    "train.de.gz": "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6",
    "train.en.gz": "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f",
    "train.fr.gz": "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c",
    "val.cs.gz": "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc",
    "val.de.gz": "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a",
    "val.en.gz": "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28",
    "val.fr.gz": "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9",
}

DOWNLOAD_TIMEOUT_S = 60

_HOW_TO_FIX = (
    "Set data.url (or the MINIMT_DATA_URL environment variable) to a folder, file:// URL or "
    f"http(s) URL holding the official Multi30k raw files, such as {MULTI30K_URL}"
)


def fetch_multi30k_file(url: str, cache_dir: str | Path, split: str, lang: str) -> Path:
    """Return the verified copy <cache_dir>/<split>.<lang>.gz, fetching it from `url` if needed."""
    name = _multi30k_file_name(split, lang)
    expected = MULTI30K_SHA256[name]
    dest = Path(cache_dir) / name
    if dest.is_file():
        actual = sha256_of(dest)
        if actual == expected:
            return dest
        logger.warning(
            "cached %s has sha256 %s, expected %s: fetching it again", dest, actual, expected
        )
        dest.unlink()

    source = f"{url.rstrip('/')}/{name}"
    logger.info("fetching %s", source)
    intact = f"{name} was not cached, the files already in {dest.parent} (data.dir) are intact"
    with with_hint(intact, WriteError), atomic_write(dest) as tmp:
        _copy_to(source, tmp)
        actual = sha256_of(tmp)
        if actual != expected:
            raise DataError(
                f"{name} fetched from {source} has the wrong checksum: expected sha256 "
                f"{expected}, got {actual}. The file was not used. Point data.url at the "
                f"official, unmodified raw files ({MULTI30K_URL})."
            )
    return dest


def fetch_multi30k_pair(
    url: str, cache_dir: str | Path, split: str, src_lang: str, tgt_lang: str
) -> tuple[Path, Path]:
    """The verified cached source and target files of one Multi30k split."""
    return (
        fetch_multi30k_file(url, cache_dir, split, src_lang),
        fetch_multi30k_file(url, cache_dir, split, tgt_lang),
    )


def load_multi30k(
    url: str, cache_dir: str | Path, src_lang: str, tgt_lang: str, splits: Sequence[str]
) -> dict[str, Pairs]:
    """Fetch, verify and read the given Multi30k splits for a language pair."""
    for split in splits:  # refuse an unknown split before downloading anything
        _multi30k_file_name(split, src_lang)
        _multi30k_file_name(split, tgt_lang)
    return {
        split: read_parallel(*fetch_multi30k_pair(url, cache_dir, split, src_lang, tgt_lang))
        for split in splits
    }


def local_path(url: str) -> Path | None:
    """The local path that `url` names (a plain path or a file:// URL); None for an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        return None
    if parts.scheme == "file":
        return Path(urllib.request.url2pathname(parts.path))
    return Path(url)


def _multi30k_file_name(split: str, lang: str) -> str:
    """The official file name for a split and language, or a DataError listing what exists."""
    name = f"{split}.{lang}.gz"
    if name in MULTI30K_SHA256:
        return name
    known = [file.split(".")[:2] for file in sorted(MULTI30K_SHA256)]  # [split, lang] each
    splits = [known_split for known_split, known_lang in known if known_lang == lang]
    if not splits:
        languages = sorted({known_lang for _, known_lang in known})
        raise DataError(
            f"Multi30k has no language {lang!r} (data.src_lang, data.tgt_lang); available "
            f"languages: {', '.join(languages)}"
        )
    raise DataError(
        f"Multi30k has no split {split!r} for language {lang!r} (data.test_sets); splits "
        f"available for {lang!r}: {', '.join(splits)}"
    )


def _copy_to(source: str, dest: Path) -> None:
    """Copy `source` (a local path, file:// URL or http(s) URL) to `dest`; a source that cannot
    be read is a DataError, a failed write the OSError that `atomic_write` reports."""
    path = local_path(source)
    if path is not None:
        if not path.is_file():
            raise DataError(f"{path} does not exist. {_HOW_TO_FIX}.")
        try:
            shutil.copyfile(path, dest)
        except OSError as error:
            if is_write_fault(error, written=[dest]):
                raise  # atomic_write says it: the cache's fault, not the source's
            raise DataError(
                f"cannot read {path}: {error.strerror or error}. {_HOW_TO_FIX}."
            ) from None
        return
    try:
        with urllib.request.urlopen(source, timeout=DOWNLOAD_TIMEOUT_S) as response:
            with dest.open("wb") as file:
                shutil.copyfileobj(response, file)
    except urllib.error.HTTPError as error:
        raise DataError(f"cannot download {source}: HTTP {error.code}. {_HOW_TO_FIX}.") from None
    except OSError as error:  # URLError, refused connections and timeouts alike
        if only_a_write_fails(error):
            raise  # the cache's disk, not the download: atomic_write says it
        reason = getattr(error, "reason", error)
        raise DataError(f"cannot download {source}: {reason}. {_HOW_TO_FIX}.") from None
