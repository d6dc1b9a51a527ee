import logging
import unicodedata

import pytest

from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.translator import Translator, fit_to_model
from tests.helpers import run_script, tiny_transformer, todays_frozen_run

SENTENCES = [
    "Ein Hund rennt über die Wiese.",
    "Zwei Männer spielen Fußball.",
    "Eine Frau liest ein Buch im Park.",
    "Kinder spielen im Schnee.",
    "",
]


@pytest.fixture(scope="module")
def tiny():
    tokenizer = train_bpe(SENTENCES * 3, vocab_size=300)
    tokenizers = TokenizerPair(tokenizer, tokenizer)
    model = tiny_transformer(
        tokenizers.src_vocab_size,
        d_model=32,
        n_encoder_layers=1,
        n_decoder_layers=1,
        d_ff=64,
        max_seq_len=40,
    )
    return model, tokenizers


def translate(model, tokenizers, lines, batch_tokens=1000, beam=1):
    translator = Translator(
        model, tokenizers, max_len_a=1.0, max_len_b=5, batch_tokens=batch_tokens
    )
    return translator.translate(lines, beam=beam)


def test_output_order_matches_input_whatever_the_batching(tiny):
    model, tokenizers = tiny
    together = translate(model, tokenizers, SENTENCES)
    alone = [translate(model, tokenizers, [s])[0] for s in SENTENCES]
    assert len(together) == len(SENTENCES) and together == alone
    assert translate(model, tokenizers, SENTENCES, batch_tokens=8) == together


def test_blank_lines_give_empty_translations_and_beam_keeps_order(tiny):
    model, tokenizers = tiny
    hyps = translate(model, tokenizers, ["", SENTENCES[0], "   ", SENTENCES[1]], beam=3)
    assert hyps[0] == "" and hyps[2] == ""
    assert hyps[1] == translate(model, tokenizers, [SENTENCES[0]], beam=3)[0]


def test_beam_one_is_greedy(tiny):
    model, tokenizers = tiny
    assert translate(model, tokenizers, SENTENCES, beam=1) == translate(
        model, tokenizers, SENTENCES
    )


def test_a_source_longer_than_the_model_allows_is_cut_with_a_warning(tiny, caplog):
    model, tokenizers = tiny
    long_line = " ".join(SENTENCES[:4] * 5)
    with caplog.at_level(logging.WARNING, logger="minimt.translator"):
        hyps = translate(model, tokenizers, [SENTENCES[0], long_line])
    assert len(hyps) == 2
    assert "lines 2" in caplog.text and "39 source tokens" in caplog.text


def test_fit_to_model_keeps_short_sources_unchanged():
    assert fit_to_model([[1, 2], [3, 4, 5, 6]], limit=3) == [[1, 2], [3, 4, 5]]


@pytest.mark.parametrize("beam", [1, 3])
def test_without_the_cache_every_beam_re_reads_the_prefix_and_translates_the_same(
    tiny, monkeypatch, beam
):
    model, tokenizers = tiny
    cached = translate(model, tokenizers, SENTENCES, beam=beam)
    uncached = Translator(
        model, tokenizers, max_len_a=1.0, max_len_b=5, batch_tokens=1000, use_cache=False
    )

    def no_cache(*args, **kwargs):
        raise AssertionError("use_cache=False started a decoder cache")

    monkeypatch.setattr(model, "start_decoding", no_cache)
    assert uncached.translate(SENTENCES, beam=beam) == cached


def test_translate_reads_a_byte_order_mark_and_decomposed_umlauts_as_the_plain_text():
    run = todays_frozen_run()
    composed = "Ein Mädchen wartet in der Küche.\nEine Katze läuft.\n"
    assert unicodedata.normalize("NFD", composed) != composed
    plain = run_script("translate.py", f"run={run}", stdin=composed.encode())
    marked = "\ufeff" + unicodedata.normalize("NFD", composed)  # both at once: one process less
    result = run_script("translate.py", f"run={run}", stdin=marked.encode())
    assert result.returncode == 0 and result.stdout == plain.stdout != b"", result.stderr
