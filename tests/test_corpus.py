"""Fetching, verifying and reading raw parallel text."""

import gzip
import http.server
import logging
import re
import shutil
import threading
import unicodedata
from functools import partial

import pytest

from minimt.data.corpus import (
    DataError,
    count_lines,
    parallel_files,
    read_lines,
    read_parallel,
    sha256_of,
    text_lines,
)
from minimt.data.multi30k import MULTI30K_SHA256, fetch_multi30k_file, load_multi30k


def streamed(src, tgt, limit=None):
    """What parallel_files reads, as read_parallel's (source lines, target lines)."""
    corpus = parallel_files(src, tgt, limit)
    return list(corpus.src_lines()), list(corpus.tgt_lines())


READERS = pytest.mark.parametrize("read", [read_parallel, streamed], ids=["lists", "streamed"])


@pytest.fixture
def val_source(tmp_path, multi30k_dir):
    """A folder holding a copy of the real val.de.gz, which tests may alter or delete."""
    folder = tmp_path / "source"
    folder.mkdir()
    shutil.copy(multi30k_dir / "val.de.gz", folder)
    return folder


@pytest.fixture
def http_url(val_source):
    """An http:// URL served from `val_source` on localhost."""
    handler = partial(QuietHandler, directory=str(val_source))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_pinned_table_holds_all_official_files():
    assert len(MULTI30K_SHA256) == 22
    assert "test_2016_flickr.cs.gz" in MULTI30K_SHA256
    assert "test_2017_mscoco.cs.gz" not in MULTI30K_SHA256


@pytest.mark.parametrize("as_uri", [False, True], ids=["folder", "file-url"])
def test_fetch_from_local_folder_or_file_url(tmp_path, val_source, as_uri):
    url = val_source.as_uri() if as_uri else str(val_source)
    path = fetch_multi30k_file(url, tmp_path / "cache", "val", "de")
    assert path == tmp_path / "cache" / "val.de.gz"
    assert sha256_of(path) == MULTI30K_SHA256["val.de.gz"]


def test_fetch_over_http(tmp_path, http_url):
    path = fetch_multi30k_file(http_url, tmp_path / "cache", "val", "de")
    assert sha256_of(path) == MULTI30K_SHA256["val.de.gz"]
    assert [p.name for p in path.parent.iterdir()] == ["val.de.gz"]  # no temp file left


def test_http_file_not_found_names_the_url(tmp_path, http_url):
    with pytest.raises(DataError, match=re.escape(f"{http_url}val.en.gz: HTTP 404")):
        fetch_multi30k_file(http_url, tmp_path / "cache", "val", "en")


def test_unreachable_url_is_a_data_error_naming_it(tmp_path):
    with pytest.raises(DataError, match=re.escape("http://127.0.0.1:9/val.de.gz")):
        fetch_multi30k_file("http://127.0.0.1:9/", tmp_path / "cache", "val", "de")


def test_cached_file_is_used_without_the_source(tmp_path, val_source):
    cache = tmp_path / "cache"
    first = fetch_multi30k_file(str(val_source), cache, "val", "de")
    shutil.rmtree(val_source)
    assert fetch_multi30k_file(str(val_source), cache, "val", "de") == first


def test_corrupted_cache_file_is_fetched_again(tmp_path, val_source):
    cache = tmp_path / "cache"
    path = fetch_multi30k_file(str(val_source), cache, "val", "de")
    path.write_bytes(b"not the corpus")
    assert fetch_multi30k_file(str(val_source), cache, "val", "de") == path
    assert sha256_of(path) == MULTI30K_SHA256["val.de.gz"]


def test_checksum_mismatch_is_rejected_and_not_cached(tmp_path, val_source):
    source = val_source / "val.de.gz"
    lines = gzip.decompress(source.read_bytes()).splitlines(keepends=True)
    lines[4] = b"Ein manipulierter Satz.\n"
    source.write_bytes(gzip.compress(b"".join(lines)))
    cache = tmp_path / "cache"

    with pytest.raises(DataError, match="sha256") as error:
        fetch_multi30k_file(str(val_source), cache, "val", "de")

    message = str(error.value)
    assert str(source) in message and MULTI30K_SHA256["val.de.gz"] in message
    assert sha256_of(source) in message and "not used" in message
    assert list(cache.iterdir()) == []


def test_missing_folder_names_the_place_and_the_fix(tmp_path):
    with pytest.raises(DataError) as error:
        fetch_multi30k_file("/nonexistent/place", tmp_path / "cache", "train", "de")
    message = str(error.value)
    assert "/nonexistent/place/train.de.gz" in message
    assert "data.url" in message and "MINIMT_DATA_URL" in message
    assert "github" in message


@pytest.mark.parametrize(
    ("split", "lang", "listed"),
    [("test_2017_mscoco", "cs", "test_2016_flickr"), ("train", "xx", "de")],
)
def test_unknown_split_or_language_lists_what_exists(tmp_path, split, lang, listed):
    with pytest.raises(DataError, match=listed):
        fetch_multi30k_file("/unused", tmp_path, split, lang)


def test_load_refuses_unknown_split_before_fetching(tmp_path, val_source):
    cache = tmp_path / "cache"
    with pytest.raises(DataError, match="test_2017_mscoco"):
        load_multi30k(str(val_source), cache, "de", "cs", ["val", "test_2017_mscoco"])
    assert not cache.exists()


def test_real_corpus_line_counts(tmp_path, multi30k_dir):
    splits = ["train", "val", "test_2016_flickr"]
    data = load_multi30k(str(multi30k_dir), tmp_path, "de", "en", splits)
    assert {split: (len(src), len(tgt)) for split, (src, tgt) in data.items()} == {
        "train": (29_000, 29_000),
        "val": (1_014, 1_014),
        "test_2016_flickr": (1_000, 1_000),
    }
    assert data["val"][0][0] == "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen"


@READERS
def test_reading_keeps_everything_but_the_newline(tmp_path, read):
    src, tgt = tmp_path / "a.de.gz", tmp_path / "a.en"
    src.write_bytes(gzip.compress(b" Ein  Mann\r\n\tlacht \r\n\n"))
    tgt.write_bytes(b"A  man\nlaughs\rloudly\nlast line without newline ")
    assert read(src, tgt) == (
        [" Ein  Mann", "\tlacht ", ""],
        ["A  man", "laughs\rloudly", "last line without newline "],
    )
    assert count_lines(src) == count_lines(tgt) == 3


@pytest.mark.parametrize("text", [b"", b"a", b"a\n", b"a\n\n", b"\n", b"a\nb"])
def test_count_lines_counts_what_is_read(tmp_path, text):
    path = tmp_path / "f.txt"
    path.write_bytes(text)
    assert count_lines(path) == len(read_parallel(path, path)[0])


def test_streamed_pairs_stop_at_the_limit(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_text("eins\nzwei\ndrei\n", encoding="utf-8")
    tgt.write_text("one\ntwo\nthree\n", encoding="utf-8")
    corpus = parallel_files(src, tgt, limit=2)
    assert corpus.num_pairs == 2 and parallel_files(src, tgt, limit=9).num_pairs == 3
    assert list(corpus.rows()) == [{"src": "eins", "tgt": "one"}, {"src": "zwei", "tgt": "two"}]


def test_fingerprint_follows_the_bytes_and_the_limit(tmp_path):
    for name, text in [("a", "x\ny\n"), ("b", "x\ny\n"), ("c", "x\nz\n")]:
        (tmp_path / name).write_text(text, encoding="utf-8")
    fingerprint = parallel_files(tmp_path / "a", tmp_path / "a").fingerprint
    assert parallel_files(tmp_path / "b", tmp_path / "b").fingerprint == fingerprint
    assert parallel_files(tmp_path / "a", tmp_path / "c").fingerprint != fingerprint
    assert parallel_files(tmp_path / "a", tmp_path / "a", limit=1).fingerprint != fingerprint


def test_files_without_some_lines_stream_and_fingerprint_the_rest(tmp_path):
    src, tgt = tmp_path / "a.de", tmp_path / "a.en"
    src.write_text("eins\nzwei\ndrei\nvier\n", encoding="utf-8")
    tgt.write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    corpus = parallel_files(src, tgt, limit=3)
    fewer = corpus.without([1]).without([1])
    assert fewer.num_pairs == 2 and fewer.skip == (1,)
    assert list(fewer.src_lines()) == ["eins", "drei"] and list(fewer.tgt_lines()) == [
        "one",
        "three",
    ]
    assert fewer.fingerprint != corpus.fingerprint == corpus.without([]).fingerprint
    assert corpus.without([0]).fingerprint != corpus.without([2]).fingerprint
    with pytest.raises(ValueError, match="must lie in 0..2"):
        corpus.without([3])  # past the limit


@READERS
def test_line_count_mismatch_names_both_files_and_counts(tmp_path, read):
    src, tgt = tmp_path / "train.de", tmp_path / "train.en"
    src.write_text("Satz\n" * 300, encoding="utf-8")
    tgt.write_text("sentence\n" * 299, encoding="utf-8")
    with pytest.raises(DataError) as error:
        read(src, tgt)
    message = str(error.value)
    assert f"{src} has 300 lines" in message and f"{tgt} has 299 lines" in message


@READERS
def test_invalid_utf8_names_file_and_line(tmp_path, read):
    src, tgt = tmp_path / "bad.de", tmp_path / "ok.en"
    src.write_bytes(b"eins\nzwei\ndr\xffei\nvier\n")
    tgt.write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(f"{src} line 3 ")):
        read(src, tgt)


@READERS
def test_missing_file_names_the_path(tmp_path, read):
    missing = tmp_path / "missing.de"
    (tmp_path / "ok.en").write_text("one\n", encoding="utf-8")
    with pytest.raises(DataError, match=re.escape(str(missing))):
        read(missing, tmp_path / "ok.en")


@READERS
def test_broken_gzip_is_a_data_error(tmp_path, read):
    broken = tmp_path / "broken.de.gz"
    broken.write_bytes(b"plain text, not gzip\n")
    with pytest.raises(DataError, match=re.escape(str(broken))):
        read(broken, broken)


def test_a_byte_order_mark_and_decomposed_umlauts_read_as_the_plain_composed_text(tmp_path, caplog):
    composed = "Ein Mädchen läuft über die Straße."
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    path = tmp_path / "text.de"
    path.write_bytes(("\ufeff" + composed + "\n" + decomposed + "\r\nplain\n").encode())
    with caplog.at_level(logging.INFO, logger="minimt.data.corpus"):
        assert read_lines(path) == [composed, composed, "plain"]
    assert caplog.text.count("2 line(s) normalized (byte-order mark dropped, Unicode NFC)") == 1
    assert read_lines(path) == list(text_lines(path.read_bytes().splitlines(True), "text.de"))


def test_a_byte_order_mark_after_the_first_line_is_text(tmp_path):
    path = tmp_path / "text.de"
    path.write_bytes("eins\n\ufeffzwei\n".encode())
    assert read_lines(path) == ["eins", "\ufeffzwei"]
