"""TensorBoard views: what each writes (read back from the event files), and that it is right."""

import math

import pytest
import torch
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import api_pb2, plugin_data_pb2
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.model.embedding import POSITIONAL_ENCODINGS
from minimt.model.transformer import padding_mask
from minimt.study.views import (
    cosine_similarity_matrix,
    cross_attention,
    log_cross_attention,
    log_embedding_norms,
    log_embedding_projector,
    log_hparams,
    log_positional_views,
    positional_table,
    token_labels,
)
from tests.helpers import collate, tiny_transformer

SENTENCES = [
    "Ein Hund rennt über die Wiese.",
    "Zwei Männer spielen\tFußball im Park.",
    "Eine Frau liest ein Buch.\nDer Junge lacht.",
    "A dog runs across the meadow.",
    "Two men play football in the park.",
] * 4


@pytest.fixture(scope="module")
def tokenizers() -> TokenizerPair:
    shared = train_bpe(SENTENCES, vocab_size=300)
    return TokenizerPair(shared, shared)


@pytest.fixture
def writer(tmp_path):
    with SummaryWriter(tmp_path) as writer:
        yield writer


def events(writer: SummaryWriter) -> EventAccumulator:
    writer.flush()
    accumulator = EventAccumulator(str(writer.log_dir))
    accumulator.Reload()
    return accumulator


def model_for(tokenizers: TokenizerPair, **overrides) -> nn.Module:
    return tiny_transformer(tokenizers.tgt_vocab_size, **overrides)


def batch(tokenizers: TokenizerPair):
    """Two German-English pairs of different lengths, so that both sides are padded."""
    src = tokenizers.encode_src([SENTENCES[0], SENTENCES[1]])
    tgt = tokenizers.encode_tgt([SENTENCES[4], SENTENCES[3]])
    return collate(src, tgt)


def test_hparams_written_into_the_run_folder(writer, tmp_path):
    cfg = OmegaConf.create(
        {
            "pe": {"encoder": "learned", "decoder": "none"},
            "embedding": {"scale": False, "share": True, "init_std": None},  # true: old "all"
            "trainer": {"seed": 3, "lr": 1e-3, "warmup_steps": 800},
            "model": {"d_model": 256},
            "tokenizer": {"vocab_size": 8000},
            "data": {
                "src_lang": "de",
                "tgt_lang": "en",
                "train_max_words": 15,
                "train_subsample": None,
            },
        }
    )
    metrics = {
        "steps": 120,
        "best_val_bleu": 30.5,
        "best_step": 100,
        "val_history": [{"step": 50, "loss": 3.0}, {"step": 100, "loss": 2.5}],
        "test": {"test_2016_flickr": {"bleu": 31.0}},
        "test_average": {"test_2016_flickr": {"bleu": 31.5}},
    }
    log_hparams(writer, cfg, metrics)

    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []  # no timestamped subfolder
    accumulator = events(writer)
    content = accumulator.PluginTagToContent("hparams")
    assert set(content) == {
        "_hparams_/experiment",
        "_hparams_/session_start_info",
        "_hparams_/session_end_info",
    }
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hparams = start.session_start_info.hparams
    strings = {name: value.string_value for name, value in hparams.items() if value.string_value}
    assert strings == {
        "pe.encoder": "learned",
        "pe.decoder": "none",
        "scale": "false",
        "share": "all",
        "init_std": "d_model^-0.5",
        "train_max_words": "15",
        "train_subsample": "all",
        "langs": "de-en",
    }
    assert hparams["seed"].number_value == 3
    assert hparams["d_model"].number_value == 256
    scores = {
        tag: accumulator.Scalars(tag)[-1].value
        for tag in (
            "hparam/best_val_bleu",
            "hparam/val_loss",
            "hparam/test_bleu",
            "hparam/test_average_bleu",
        )
    }
    assert scores == {
        "hparam/best_val_bleu": 30.5,
        "hparam/val_loss": 2.5,
        "hparam/test_bleu": 31.0,
        "hparam/test_average_bleu": 31.5,
    }


def test_hparams_names_and_booleans_are_discrete_string_filters(writer):
    cfg = OmegaConf.create(
        {
            "pe": {"encoder": "rope", "decoder": "rope"},
            "embedding": {"scale": True, "share": "decoder", "init_std": 1.0},
            "trainer": {"seed": 1, "lr": 1e-3, "warmup_steps": 800},
            "model": {"d_model": 64},
            "tokenizer": {"vocab_size": 1000},
            "data": {
                "src_lang": "de",
                "tgt_lang": "en",
                "train_max_words": None,
                "train_subsample": 12000,
            },
        }
    )
    metrics = {"steps": 1, "best_val_bleu": 0.0, "best_step": 1, "val_history": [], "test": {}}
    log_hparams(writer, cfg, metrics)

    content = events(writer).PluginTagToContent("hparams")["_hparams_/experiment"]
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    infos = {info.name: info for info in experiment.hparam_infos}
    string_type = api_pb2.DataType.Value("DATA_TYPE_STRING")
    domains = {
        name: [value.string_value for value in info.domain_discrete.values]
        for name, info in infos.items()
        if info.type == string_type and info.HasField("domain_discrete")
    }
    assert domains == {
        "pe.encoder": list(POSITIONAL_ENCODINGS),
        "pe.decoder": list(POSITIONAL_ENCODINGS),
        "scale": ["false", "true"],
        "share": ["none", "decoder", "all"],
    }
    assert {"alibi", "sinusoidal", "learned", "rope", "none"} <= set(domains["pe.encoder"])
    assert infos["init_std"].type == infos["train_subsample"].type == string_type
    assert infos["d_model"].type == api_pb2.DataType.Value("DATA_TYPE_FLOAT64")


def test_projector_table_and_one_label_per_row(writer, tmp_path, tokenizers):
    model = model_for(tokenizers)
    log_embedding_projector(writer, model, tokenizers, step=7, max_tokens=280)

    assert "tgt_tokens" in (tmp_path / "projector_config.pbtxt").read_text()
    folder = tmp_path / "00007" / "tgt_tokens"
    labels = (folder / "metadata.tsv").read_text().removesuffix("\n").split("\n")
    rows = (folder / "tensors.tsv").read_text().strip().split("\n")
    assert len(labels) == len(rows) == 280
    assert labels[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert all(label and "\t" not in label for label in labels)
    row = [float(x) for x in rows[5].split("\t")]  # rounded to 4 decimals
    assert row == pytest.approx(model.embedding.tgt_token_weight[5].tolist(), abs=5.1e-5)


def test_token_labels_are_readable_single_lines(tokenizers):
    tab, newline, space_dog = (tokenizers.encode_tgt([s])[0] for s in ("\t", "\n", " dog"))
    assert token_labels(tokenizers.tgt, tab) == ["\\t"]
    assert token_labels(tokenizers.tgt, newline) == ["\\n"]
    assert "".join(token_labels(tokenizers.tgt, space_dog)) == "▁dog"
    umlaut_bytes = tokenizers.tgt.token_to_id("Ã")  # first byte of ä, ö, ü as a byte symbol
    assert token_labels(tokenizers.tgt, [umlaut_bytes]) == ["Ã"]


@pytest.mark.parametrize("pe", ["sinusoidal", "learned"])
def test_positional_views_written(writer, tokenizers, pe):
    model = model_for(tokenizers, pos_encoding=pe)
    log_positional_views(writer, model, step=3, max_positions=40)

    images = events(writer).Tags()["images"]
    assert set(images) == {"positions/table", "positions/cosine_similarity"}


def test_positional_table_is_the_added_table(tokenizers):
    learned = model_for(tokenizers, pos_encoding="learned")
    assert torch.equal(positional_table(learned), learned.embedding.positions.table.weight)
    zeros = torch.zeros(1, 5, 16)
    sinusoidal = model_for(tokenizers, pos_encoding="sinusoidal")
    assert torch.equal(
        positional_table(sinusoidal)[:5], sinusoidal.embedding.positions.add(zeros, 0)[0]
    )


@pytest.mark.parametrize(
    ("sides", "images"),
    [
        (dict(src_pos_encoding="learned", tgt_pos_encoding="sinusoidal"), {"src", "tgt"}),
        (dict(tgt_pos_encoding="none"), {"src"}),
        (dict(src_pos_encoding="alibi", tgt_pos_encoding="learned"), {"tgt"}),
    ],
)
def test_sides_with_different_encodings_are_drawn_apart(writer, tokenizers, sides, images):
    model = model_for(tokenizers, **sides)
    log_positional_views(writer, model, step=3, max_positions=40)

    drawn = set(events(writer).Tags()["images"])
    assert drawn == {
        f"positions/{side}/{view}" for side in images for view in ("table", "cosine_similarity")
    }
    for side in ("src", "tgt"):
        assert (positional_table(model, side) is not None) == (side in images)


@pytest.mark.parametrize("pe", ["none", "rope", "alibi"])
def test_no_positional_table_writes_nothing(writer, tokenizers, pe):
    model = model_for(tokenizers, pos_encoding=pe)
    assert positional_table(model) is None
    log_positional_views(writer, model, step=1)
    log_embedding_norms(writer, model, batch(tokenizers).src, step=1)

    accumulator = events(writer)
    assert accumulator.Tags()["images"] == []
    assert set(accumulator.Tags()["scalars"]) == {"embedding/token_norm", "embedding/position_norm"}
    assert accumulator.Scalars("embedding/position_norm")[0].value == 0


def test_cosine_similarity_matrix():
    table = torch.randn(30, 8)
    similarity = cosine_similarity_matrix(table)
    assert similarity.diagonal() == pytest.approx(torch.ones(30).tolist(), abs=1e-6)
    assert torch.allclose(similarity, similarity.T)
    assert similarity[3, 7].item() == pytest.approx(
        torch.nn.functional.cosine_similarity(table[3], table[7], dim=0).item(), abs=1e-6
    )


def test_embedding_norms_scale_by_sqrt_d_model(tmp_path, tokenizers):
    src = batch(tokenizers).src
    norms = {}
    for scale in (True, False):
        with SummaryWriter(tmp_path / str(scale)) as writer:
            log_embedding_norms(writer, model_for(tokenizers, scale_embedding=scale), src, step=2)
            accumulator = events(writer)
        tags = accumulator.Tags()["scalars"]
        norms[scale] = {tag: accumulator.Scalars(tag)[-1].value for tag in tags}
    d_model = 16
    on, off = norms[True], norms[False]
    assert on["embedding/token_norm"] == pytest.approx(
        off["embedding/token_norm"] * math.sqrt(d_model), rel=1e-5
    )
    # sin^2 + cos^2 = 1 per pair of dimensions: every sinusoidal row has norm sqrt(d_model / 2)
    assert on["embedding/position_norm"] == pytest.approx(math.sqrt(d_model / 2), rel=1e-5)
    assert on["embedding/token_to_position"] == pytest.approx(
        on["embedding/token_norm"] / on["embedding/position_norm"], rel=1e-5
    )


@pytest.mark.parametrize("pe", ["sinusoidal", "rope"])
def test_recomputed_cross_attention_is_the_modules(tokenizers, pe):
    model = model_for(tokenizers, pos_encoding=pe)
    b = batch(tokenizers)
    caught = []
    last = model.decoder_layers[-1].cross_attn
    handle = last.register_forward_hook(lambda m, args, out: caught.append((args[1], out)))
    with torch.no_grad():
        model.decode(b.tgt_in, model.encode(b.src), b.src)
    handle.remove()
    memory, output = caught[0]

    weights = cross_attention(model, b.src, b.tgt_in)
    assert len(weights) == len(model.decoder_layers)
    probs = weights[-1]  # (B, h, T, S)
    _, v = last.keys_values(memory)  # (B, h, S, d_k)
    recomputed = last.out_proj((probs @ v).transpose(1, 2).flatten(2))
    torch.testing.assert_close(recomputed, output, atol=1e-5, rtol=1e-5)
    assert torch.allclose(probs.sum(-1), torch.ones(()))
    pads = ~padding_mask(b.src, model.pad_id).expand_as(probs)
    assert pads.any() and (probs[pads] == 0).all()


def test_attention_probs_without_mask_sum_to_one():
    attn = tiny_transformer(50).decoder_layers[0].cross_attn
    x, context = torch.randn(2, 3, 16), torch.randn(2, 5, 16)
    with torch.no_grad():
        probs = attn.weights(x, context, None)
    assert probs.shape == (2, 2, 3, 5)
    assert torch.allclose(probs.sum(-1), torch.ones(()))


def test_cross_attention_heatmap_per_sentence(writer, tokenizers):
    model = model_for(tokenizers)
    b = batch(tokenizers)
    log_cross_attention(writer, model, b.src, b.tgt_in, step=4, tokenizers=tokenizers)

    images = events(writer).Tags()["images"]
    assert set(images) == {"cross_attention/0", "cross_attention/1"}
