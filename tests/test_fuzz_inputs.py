"""Hostile inputs: random unicode, control characters, huge lines, binary garbage, empty files.

Every case ends in an output or a clear error (a DataError naming the file, a one-line exit from
translate.py), never a hang or a traceback from inside tokenizers, gzip or torch. `make test`
tries the same cases on every run, `make fuzz` many more, freshly drawn.
"""

import gzip
import io
import re
import subprocess
import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import OmegaConf

from minimt.checkpoint import save_checkpoint
from minimt.config import build_model
from minimt.data.corpus import DataError, read_lines, read_parallel, text_lines
from minimt.data.splits import load_text_splits
from minimt.data.tokenizer import SPECIAL_TOKENS, TokenizerPair, train_bpe
from minimt.translator import Translator
from tests.helpers import (
    compose_config,
    fuzz_settings,
    run_in_process,
    run_script,
    tiny_transformer,
)

TRICKY_PIECES = [
    "\x00", "\t", "\r", "\n", "\r\n", "\x0b", "\x1b[31m", "\x7f", "\x85", "\u2028", "\ufeff",
    "\u200f", "\u202e", "e\u0301", "a\u0308", "\u200b", "\u00ad", "\u2060",
    "😀", "👩‍👩‍👧", "\U0010ffff", "\ufffd", " ", "\u3000",
]  # fmt: skip
HOSTILE_TEXT = st.lists(
    st.one_of(st.text(st.characters(codec="utf-8"), max_size=12), st.sampled_from(TRICKY_PIECES)),
    max_size=12,
).map("".join)
HOSTILE_LINE = HOSTILE_TEXT.map(lambda text: text.replace("\n", " "))
NOT_UTF8 = [b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x80"]
HOSTILE_BYTES = st.one_of(
    HOSTILE_TEXT.map(str.encode),  # valid UTF-8, with every kind of line break
    st.lists(
        st.one_of(
            HOSTILE_TEXT.map(str.encode),
            st.binary(max_size=16),
            st.sampled_from([b"\n", b"\r\n", b"\r", b"\x00", b"\xef\xbb\xbf", *NOT_UTF8]),
        ),
        max_size=12,
    ).map(b"".join),
)

GERMAN = ["Ein Hund rennt über die Wiese.", "Zwei Männer spielen Fußball.", "Kinder im Schnee."]


@pytest.fixture(scope="module")
def tokenizers():
    tokenizer = train_bpe(GERMAN * 3 + TRICKY_PIECES, vocab_size=320)
    return TokenizerPair(tokenizer, tokenizer)


@pytest.fixture(scope="module")
def translator(tokenizers):
    model = tiny_transformer(
        tokenizers.src_vocab_size, n_encoder_layers=1, n_decoder_layers=1, max_seq_len=24
    )  # 24 positions: ordinary fuzz lines overflow them already
    return Translator(model, tokenizers, max_len_a=1.0, max_len_b=4, batch_tokens=64)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tokenizers):
    """A run directory holding an untrained tiny model: what translate.py loads, in a second."""
    run = tmp_path_factory.mktemp("run")
    cfg = compose_config(
        "model.d_model=16",
        "model.d_ff=32",
        "model.n_encoder_layers=1",
        "model.n_decoder_layers=1",
        "model.max_seq_len=24",
        "trainer.precision=fp32",
    )
    model = build_model(cfg, tokenizers.src_vocab_size, tokenizers.tgt_vocab_size)
    weights = {"model": model.state_dict(), "config": OmegaConf.to_container(cfg, resolve=True)}
    save_checkpoint(run / "checkpoints" / "best.pt", weights)
    tokenizers.save(run)
    return run


# Tokenizer


@fuzz_settings(examples=200)
@given(text=HOSTILE_TEXT)
def test_any_text_round_trips_through_byte_level_bpe(tokenizers, text):
    (ids,) = tokenizers.encode_src([text])
    assert all(len(SPECIAL_TOKENS) <= i < tokenizers.src_vocab_size for i in ids)
    assert tokenizers.decode_tgt([ids]) == [text]


@fuzz_settings(examples=5)
@given(piece=HOSTILE_TEXT.filter(bool))
def test_a_100k_character_line_round_trips(tokenizers, piece):
    text = (piece * (100_000 // len(piece) + 1))[:100_000]
    (ids,) = tokenizers.encode_src([text])
    assert tokenizers.decode_tgt([ids]) == [text]


@pytest.mark.parametrize("text", ["a <eos> b", "<pad>", "x<unk>y", "<bos>"])
def test_special_token_names_in_text_are_plain_text(tokenizers, text):
    (ids,) = tokenizers.encode_src([text])
    assert min(ids) >= len(SPECIAL_TOKENS) and tokenizers.decode_tgt([ids]) == [text]


def test_a_lone_surrogate_is_refused_by_the_tokenizer_with_a_type_error(tokenizers):
    with pytest.raises(TypeError):  # HF tokenizers' own error; strict UTF-8 input never holds one
        tokenizers.encode_src(["a\ud800b"])


# Corpus files


def expected_lines(data: bytes) -> list[str] | int:
    """The lines of `data` (split at b"\\n", one b"\\r" before it dropped), in Unicode NFC, a
    byte-order mark at its start dropped; or the number of the first line that is no UTF-8."""
    *ended, last = data.split(b"\n")
    lines = [line.removesuffix(b"\r") for line in ended] + ([last] if last else [])
    for number, line in enumerate(lines, start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            return number
    text = [line.decode("utf-8") for line in lines]
    if text:
        text[0] = text[0].removeprefix("\ufeff")
    return [unicodedata.normalize("NFC", line) for line in text]


def read_outcome(path) -> list[str] | DataError:
    """The lines of `path`, or the DataError it raised (which must name the file)."""
    try:
        return read_lines(path)
    except DataError as error:
        assert str(path) in str(error)
        return error


def assert_reads_as_expected(path, data: bytes) -> None:
    expected, outcome = expected_lines(data), read_outcome(path)
    if isinstance(expected, int):
        assert f"line {expected} is not valid UTF-8" in str(outcome)
    else:
        assert outcome == expected


@fuzz_settings(examples=150)
@given(data=HOSTILE_BYTES)
def test_plain_and_gzipped_files_give_their_lines_or_name_the_first_bad_one(tmp_path, data):
    plain, packed = tmp_path / "corpus.de", tmp_path / "corpus.de.gz"
    plain.write_bytes(data)
    packed.write_bytes(gzip.compress(data))
    assert_reads_as_expected(plain, data)
    assert_reads_as_expected(packed, data)


@fuzz_settings(examples=60)
@given(data=HOSTILE_BYTES, cut=st.floats(0, 1, exclude_max=True))
def test_a_truncated_gzip_file_is_a_data_error_naming_it(tmp_path, data, cut):
    packed = gzip.compress(data)
    path = tmp_path / "corpus.de.gz"
    path.write_bytes(packed[: max(1, int(cut * len(packed)))])
    assert isinstance(read_outcome(path), DataError)


@fuzz_settings(examples=60)
@given(data=HOSTILE_BYTES.filter(lambda data: data and not data.startswith(b"\x1f\x8b")))
def test_a_gz_name_on_a_file_that_is_not_gzip_is_a_data_error_naming_it(tmp_path, data):
    path = tmp_path / "corpus.de.gz"
    path.write_bytes(data)
    assert isinstance(read_outcome(path), DataError)


def test_an_empty_file_has_no_lines(tmp_path):
    (tmp_path / "empty.de").write_bytes(b"")
    (tmp_path / "empty.de.gz").write_bytes(b"")
    assert read_lines(tmp_path / "empty.de") == read_lines(tmp_path / "empty.de.gz") == []


def test_a_corrupt_gzip_stream_is_a_data_error_naming_it(tmp_path):
    packed = bytearray(gzip.compress("Ein Hund rennt über die Wiese.\n".encode()))
    packed[10] = 0xFF  # the first deflate block header: a final block of the reserved type 3
    path = tmp_path / "corpus.de.gz"
    path.write_bytes(packed)
    assert isinstance(read_outcome(path), DataError)


@fuzz_settings(examples=40)
@given(src=st.lists(HOSTILE_LINE, max_size=5), tgt=st.lists(HOSTILE_LINE, max_size=5))
def test_read_parallel_pairs_the_lines_or_names_both_files(tmp_path, src, tgt):
    paths = tmp_path / "corpus.de", tmp_path / "corpus.en"
    for path, lines in zip(paths, (src, tgt), strict=True):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    try:
        src_read, tgt_read = read_parallel(*paths)
    except DataError as error:
        assert len(src) != len(tgt) and all(str(path) in str(error) for path in paths)
    else:
        assert len(src) == len(tgt) == len(src_read) == len(tgt_read)


def test_parallel_text_names_a_truncated_gzip_split(tmp_path):
    good, truncated = tmp_path / "good.txt", tmp_path / "val.de.gz"
    good.write_text("Ein Hund.\n")
    truncated.write_bytes(gzip.compress(b"Ein Hund.\n")[:-3])
    sides = {
        f"{split}.{side}": good for split in ("train", "val", "test") for side in ("src", "tgt")
    }
    sides["val.src"] = truncated
    cfg = compose_config("data=parallel_text", *(f"data.{k}={path}" for k, path in sides.items()))
    with pytest.raises(DataError, match="val.de.gz"):
        load_text_splits(cfg.data)


# Translator and translate.py


@fuzz_settings(examples=40)
@given(
    lines=st.lists(st.one_of(HOSTILE_LINE, st.sampled_from(["", " ", "\t\u3000"])), max_size=6),
    beam=st.sampled_from([1, 3]),
)
def test_translate_gives_one_line_per_input_line_and_blank_stays_blank(translator, lines, beam):
    hyps = translator.translate(lines, beam=beam)
    assert len(hyps) == len(lines)
    assert all(hyp == "" for hyp, line in zip(hyps, lines, strict=True) if not line.strip())
    assert all(len(hyp.splitlines()) <= 1 for hyp in hyps)


def test_lines_far_longer_than_the_model_are_translated(translator):
    assert len(translator.translate(["Ein Hund " * 20_000, "😀\x00" * 5_000], beam=2)) == 2


def test_a_line_break_the_model_emits_does_not_split_the_output_line(translator, monkeypatch):
    (ids,) = translator.tokenizers.encode_tgt(["one\ntwo\r\nthree\u2028four"])
    monkeypatch.setattr(translator, "translate_ids", lambda lines, *_: [ids for _ in lines])
    assert translator.translate(["a", "b"]) == ["one two  three four"] * 2


@fuzz_settings(examples=150)
@given(data=HOSTILE_BYTES)
def test_translate_script_reads_each_line_or_exits_naming_the_bad_one(data):
    # translate.py reads stdin with the corpus files' reader (text_lines)
    expected = expected_lines(data)
    try:
        lines = list(text_lines(io.BytesIO(data), "stdin"))
    except DataError as error:
        assert str(error).startswith(f"stdin line {expected} is not valid UTF-8 (")
    else:
        assert lines == expected


def test_translate_script_names_a_missing_input_file(run_dir, tmp_path, capsys):
    argv = [f"run={run_dir}", f"input={tmp_path / 'missing.de'}"]
    status, _, _ = run_in_process("translate.py", argv, capsys)
    assert re.search(r"cannot read input=.*missing\.de \(No such file", str(status)), status


def test_translate_script_turns_an_empty_file_into_an_empty_file(run_dir, tmp_path, capsys):
    source, out = tmp_path / "empty.de", tmp_path / "empty.en"
    source.write_bytes(b"")
    argv = [f"run={run_dir}", f"input={source}", f"output={out}"]
    assert run_in_process("translate.py", argv, capsys)[0] is None
    assert out.read_bytes() == b""


def translate_in_a_subprocess(run_dir, stdin: bytes) -> subprocess.CompletedProcess:
    # An ASCII stdout: the output must be UTF-8 whatever the locale, as the input is.
    args = f"run={run_dir}", "device=cpu"
    return run_script("translate.py", *args, stdin=stdin, timeout=120, PYTHONIOENCODING="ascii")


def test_translate_script_exits_with_one_line_naming_a_binary_line(run_dir):
    result = translate_in_a_subprocess(run_dir, b"Ein Hund.\n\x1f\x8b\x08\x00\xff\xfe\x00\n")
    assert result.returncode == 1
    assert result.stderr.decode() == "error: stdin line 2 is not valid UTF-8 (invalid start byte)\n"


def test_translate_script_outputs_one_line_per_hostile_unicode_line(run_dir):
    lines = [p for p in TRICKY_PIECES if "\n" not in p] + ["", "<eos>", "Ein Hund " * 500]
    result = translate_in_a_subprocess(run_dir, "".join(line + "\n" for line in lines).encode())
    assert result.returncode == 0, result.stderr.decode()
    hyps = result.stdout.decode("utf-8").split("\n")
    assert len(hyps) == len(lines) + 1 and hyps[-1] == ""
    assert all(hyp == "" for hyp, line in zip(hyps, lines, strict=False) if not line.strip())
