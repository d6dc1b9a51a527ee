"""TensorBoard views: what each writes (read back from the event files), and that it is right."""

import math
from pathlib import Path

import pytest
import torch
from omegaconf import DictConfig, OmegaConf
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins import base_plugin
from tensorboard.plugins.hparams import (
    api_pb2,
    backend_context,
    get_experiment,
    list_session_groups,
    plugin_data_pb2,
)
from torch import nn
from torch.utils.tensorboard import SummaryWriter

from minimt.data.tokenizer import TokenizerPair, train_bpe
from minimt.model.positions import BUILT_IN_ENCODINGS
from minimt.model.transformer import padding_mask
from minimt.study import views
from minimt.study.views import (
    NOT_APPLICABLE,
    STUDY_VARIABLES,
    cosine_similarity_matrix,
    cross_attention,
    hparams_row,
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


def study_config(pe: dict | None = None, **sections) -> DictConfig:
    """The keys log_hparams reads, as the default config sets them: `pe` replaces the pe section,
    `sections` are merged in."""
    cfg = {
        "pe": pe or {"encoder": "sinusoidal", "decoder": "sinusoidal", "scale": 1.0},
        "embedding": {"scale": True, "share": "all", "init_std": None},
        "trainer": {"seed": 1, "lr": 1e-3, "warmup_steps": 800},
        "model": {"d_model": 64},
        "tokenizer": {"vocab_size": 1000},
        "data": {
            "src_lang": "de",
            "tgt_lang": "en",
            "train_max_words": None,
            "train_subsample": None,
        },
    }
    return OmegaConf.merge(cfg, sections)


FINISHED = {  # metrics.json's keys that log_hparams reads: two validations, one test set
    "steps": 120,
    "best_val_bleu": 30.5,
    "best_step": 100,
    "val_history": [{"step": 50, "loss": 3.0}, {"step": 100, "loss": 2.5}],
    "test": {"test_2016_flickr": {"bleu": 31.0}},
}


def hparams_plugin_view(logdir: Path) -> tuple[api_pb2.Experiment, list[api_pb2.SessionGroup]]:
    """The experiment and the session groups (one per set of hparams values) as TensorBoard's
    hparams plugin serves them to its front end, the HPARAMS tab, from the event files under
    `logdir`."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(logdir))
    multiplexer.Reload()
    provider = data_provider.MultiplexerDataProvider(multiplexer, str(logdir))
    tb_context = base_plugin.TBContext(logdir=str(logdir), data_provider=provider)
    backend = backend_context.Context(tb_context)
    request = context.RequestContext()
    asked = api_pb2.GetExperimentRequest(experiment_name="", hparams_limit=1000)
    experiment = get_experiment.Handler(request, backend, "", asked).run()
    statuses = [api_pb2.Status.Value(status) for status in api_pb2.Status.keys()]
    asked = api_pb2.ListSessionGroupsRequest(slice_size=100, allowed_statuses=statuses)
    groups = list_session_groups.Handler(request, backend, "", asked).run()
    return experiment, list(groups.session_groups)


def test_hparams_study_variables_first_named_by_config_key(writer, tmp_path):
    cfg = study_config(
        pe={"encoder": "learned", "decoder": "none", "init_std": 0.02},
        embedding={"scale": False, "share": "all"},
        trainer={"seed": 3},
        data={"train_max_words": 15},
    )
    log_hparams(writer, cfg, FINISHED | {"test_average": {"test_2016_flickr": {"bleu": 31.5}}})
    writer.flush()

    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []  # no timestamped subfolder
    experiment, groups = hparams_plugin_view(tmp_path)
    infos = [info.name for info in experiment.hparam_infos]
    # the order the HPARAMS tab lists them in; its front end ticks the first five
    assert infos[:6] == [
        "embedding.scale",
        "embedding.share",
        "pe.decoder",
        "pe.encoder",
        "pe.init_std",
        "trainer.seed",
    ]
    assert [info.differs for info in experiment.hparam_infos] == [True] * 6 + [False] * 10
    assert sorted(infos[:6]) == sorted(STUDY_VARIABLES)
    assert all(name.count(".") == 1 for name in infos)  # every one a config key
    assert [m.name.tag for m in experiment.metric_infos] == [
        "val/best_bleu",
        "val/loss_at_best",
        "test/bleu",
        "test_average/bleu",
    ]

    (group,) = groups
    (session,) = group.sessions
    assert session.name == "."  # the run's own folder, where its scalars are
    values = {name: value.WhichOneof("kind") for name, value in group.hparams.items()}
    strings = {name: value.string_value for name, value in group.hparams.items()}
    assert {name: strings[name] for name, kind in values.items() if kind == "string_value"} == {
        "pe.encoder": "learned",
        "pe.decoder": "none",
        "pe.init_std": "0.02",
        "pe.scale": NOT_APPLICABLE,
        "embedding.scale": "false",
        "embedding.share": "all",
        "embedding.init_std": "d_model^-0.5",
        "data.src_lang": "de",
        "data.tgt_lang": "en",
        "data.train_max_words": "15",
        "data.train_subsample": "all",
    }
    numbers = {name: value.number_value for name, value in group.hparams.items()}
    assert {name: numbers[name] for name, kind in values.items() if kind == "number_value"} == {
        "trainer.seed": 3,
        "trainer.lr": 1e-3,
        "trainer.warmup_steps": 800,
        "model.d_model": 64,
        "tokenizer.vocab_size": 1000,
    }
    metrics = {m.name.tag: (m.value, m.training_step) for m in session.metric_values}
    assert metrics == {
        "val/best_bleu": (30.5, 120),
        "val/loss_at_best": (2.5, 120),
    }  # test/bleu and test_average/bleu: train.evaluation.finish logs them, not log_hparams

    accumulator = events(writer)
    assert set(accumulator.Tags()["scalars"]) == {"val/best_bleu", "val/loss_at_best"}
    assert not any(tag.startswith("hparam") for tag in accumulator.Tags()["scalars"])


def test_hparams_metrics_are_the_runs_last_scalars(writer, tmp_path):
    for step, bleu in ((50, 20.0), (120, 31.0)):  # as score_checkpoint logs the headline set
        writer.add_scalar("test/bleu", bleu, step)
    log_hparams(writer, study_config(), FINISHED | {"val_history": []})
    writer.flush()

    experiment, (group,) = hparams_plugin_view(tmp_path)
    assert [m.name.tag for m in experiment.metric_infos] == ["val/best_bleu", "test/bleu"]
    metrics = {m.name.tag: m.value for m in group.metric_values}
    assert metrics == {"val/best_bleu": 30.5, "test/bleu": 31.0}


@pytest.mark.parametrize(
    ("pe", "init_std", "scale"),
    [
        ({"encoder": "learned", "decoder": "learned"}, "0.7071", NOT_APPLICABLE),  # the default
        ({"encoder": "sinusoidal", "decoder": "none", "scale": 0.5}, NOT_APPLICABLE, "0.5"),
        ({"encoder": "rope", "decoder": "alibi"}, NOT_APPLICABLE, NOT_APPLICABLE),
        (
            {"encoder": "learned", "decoder": "learned", "decoder_options": {"init_std": 0.02}},
            "encoder 0.7071, decoder 0.02",
            NOT_APPLICABLE,
        ),
    ],
)
def test_hparams_encoding_options_as_the_model_used_them(pe, init_std, scale):
    row = hparams_row(study_config(pe))
    assert (row["pe.init_std"], row["pe.scale"]) == (init_std, scale)


def test_hparams_names_and_booleans_are_discrete_string_filters(writer):
    cfg = study_config(
        pe={"encoder": "rope", "decoder": "rope"},
        embedding={"share": "decoder", "init_std": 1.0},
        data={"train_subsample": 12000},
    )
    log_hparams(writer, cfg, FINISHED | {"test": {}})

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
        "pe.encoder": list(BUILT_IN_ENCODINGS),
        "pe.decoder": list(BUILT_IN_ENCODINGS),
        "embedding.scale": ["false", "true"],
        "embedding.share": ["none", "decoder", "all"],
    }
    assert {"alibi", "sinusoidal", "learned", "rope", "none"} <= set(domains["pe.encoder"])
    assert infos["embedding.init_std"].type == string_type
    assert infos["data.train_subsample"].type == infos["pe.init_std"].type == string_type
    assert infos["model.d_model"].type == api_pb2.DataType.Value("DATA_TYPE_FLOAT64")
    assert [m.name.tag for m in experiment.metric_infos] == ["val/best_bleu", "val/loss_at_best"]


def test_hparams_an_encoding_named_by_import_path_is_in_its_filter(writer):
    path = "minimt.model.positions.LearnedPositions"
    log_hparams(writer, study_config({"encoder": path, "decoder": "none"}), FINISHED)

    content = events(writer).PluginTagToContent("hparams")["_hparams_/experiment"]
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content).experiment
    infos = {info.name: info for info in experiment.hparam_infos}
    for side in ("pe.encoder", "pe.decoder"):
        domain = [value.string_value for value in infos[side].domain_discrete.values]
        assert domain == [*BUILT_IN_ENCODINGS, path]
    assert (
        hparams_row(study_config({"encoder": path, "decoder": "none"}))["pe.init_std"] == "0.7071"
    )


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
    model = model_for(tokenizers, positions=pe)
    log_positional_views(writer, model, step=3, max_positions=40)

    images = events(writer).Tags()["images"]
    assert set(images) == {"views/positions/table", "views/positions/cosine_similarity"}


def test_positional_table_is_the_added_table(tokenizers):
    learned = model_for(tokenizers, positions="learned")
    assert torch.equal(positional_table(learned), learned.embedding.positions.table.weight)
    zeros = torch.zeros(1, 5, 16)
    sinusoidal = model_for(tokenizers, positions="sinusoidal")
    assert torch.equal(
        positional_table(sinusoidal)[:5], sinusoidal.embedding.positions.add(zeros, 0)[0]
    )


@pytest.mark.parametrize(
    ("sides", "images"),
    [
        (dict(src_positions="learned", tgt_positions="sinusoidal"), {"src", "tgt"}),
        (dict(tgt_positions="none"), {"src"}),
        (dict(src_positions="alibi", tgt_positions="learned"), {"tgt"}),
    ],
)
def test_sides_with_different_encodings_are_drawn_apart(writer, tokenizers, sides, images):
    model = model_for(tokenizers, **sides)
    log_positional_views(writer, model, step=3, max_positions=40)

    drawn = set(events(writer).Tags()["images"])
    assert drawn == {
        f"views/positions/{side}/{view}"
        for side in images
        for view in ("table", "cosine_similarity")
    }
    for side in ("src", "tgt"):
        assert (positional_table(model, side) is not None) == (side in images)


@pytest.mark.parametrize("pe", ["none", "rope", "alibi"])
def test_no_positional_table_writes_nothing(writer, tokenizers, pe):
    model = model_for(tokenizers, positions=pe)
    assert positional_table(model) is None
    log_positional_views(writer, model, step=1)
    log_embedding_norms(writer, model, batch(tokenizers).src, step=1)

    accumulator = events(writer)
    assert accumulator.Tags()["images"] == []
    assert set(accumulator.Tags()["scalars"]) == {
        "views/embedding/token_norm",
        "views/embedding/position_norm",
    }
    assert accumulator.Scalars("views/embedding/position_norm")[0].value == 0


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
    assert on["views/embedding/token_norm"] == pytest.approx(
        off["views/embedding/token_norm"] * math.sqrt(d_model), rel=1e-5
    )
    # sin^2 + cos^2 = 1 per pair of dimensions: every sinusoidal row has norm sqrt(d_model / 2)
    assert on["views/embedding/position_norm"] == pytest.approx(math.sqrt(d_model / 2), rel=1e-5)
    assert on["views/embedding/token_to_position"] == pytest.approx(
        on["views/embedding/token_norm"] / on["views/embedding/position_norm"], rel=1e-5
    )


@pytest.mark.parametrize("pe", ["sinusoidal", "rope"])
def test_recomputed_cross_attention_is_the_modules(tokenizers, pe):
    model = model_for(tokenizers, positions=pe)
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


@pytest.mark.parametrize(("layer", "named"), [(-1, "layer 2 of 2"), (0, "layer 1 of 2")])
def test_cross_attention_heatmap_per_sentence(writer, tokenizers, monkeypatch, layer, named):
    titles, draw = [], views.heatmap

    def heatmap(values, title, *args):
        titles.append(title)
        return draw(values, title, *args)

    monkeypatch.setattr(views, "heatmap", heatmap)
    model = model_for(tokenizers)
    b = batch(tokenizers)
    log_cross_attention(writer, model, b.src, b.tgt_in, 4, tokenizers, layer)

    images = events(writer).Tags()["images"]
    assert set(images) == {"views/cross_attention/0", "views/cross_attention/1"}
    assert titles == [
        f"sentence {i}: cross-attention of decoder {named}\n"
        "mean over 2 heads, reference fed in (teacher forcing)"
        for i in (0, 1)
    ]
