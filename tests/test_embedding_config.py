"""The embedding study's config keys (pe.encoder, pe.decoder, embedding.share levels,
embedding.init_std): their rules, and the model build_model makes of them."""

import pytest
import torch
from omegaconf import OmegaConf

from minimt import pe_section
from minimt.config import ConfigError, build_model, resume_mismatches, validate_config
from minimt.encoding_choice import encoding_class
from minimt.model.positions import (
    AlibiBias,
    LearnedPositions,
    NoPositions,
    RotaryPositions,
    SinusoidalPositions,
)
from minimt.train.loop import train
from tests.helpers import REPO, compose_config, toy_run_overrides

VOCAB = 300
SMALL = ["model.d_model=32", "model.d_ff=64", "model.n_heads=4"]  # d_head 8


def build(*overrides: str, seed: int = 0):
    cfg = compose_config(*SMALL, *overrides)
    validate_config(cfg)
    torch.manual_seed(seed)
    return build_model(cfg, VOCAB, VOCAB)


POSITION_MODULES = {
    "sinusoidal": SinusoidalPositions,
    "learned": LearnedPositions,
    "none": NoPositions,
    "rope": RotaryPositions,
    "alibi": AlibiBias,
}


@pytest.mark.parametrize(
    ("overrides", "encoder", "decoder"),
    [
        *(([f"pe={name}"], name, name) for name in POSITION_MODULES),
        (["pe.decoder=none"], "sinusoidal", "none"),
        (["pe.encoder=none"], "none", "sinusoidal"),
        (["pe=alibi", "pe.encoder=rope"], "rope", "alibi"),
        (["pe=learned", "pe.decoder=alibi"], "learned", "alibi"),
    ],
)
def test_each_side_s_encoding_builds_from_the_config(overrides, encoder, decoder):
    model = build(*overrides)
    embedding = model.embedding
    assert type(embedding.src_positions) is POSITION_MODULES[encoder]
    assert type(embedding.tgt_positions) is POSITION_MODULES[decoder]
    assert (embedding.src_positions is embedding.tgt_positions) == (encoder == decoder)
    assert isinstance(model.encoder_bias, AlibiBias) == (encoder == "alibi")
    assert isinstance(model.decoder_bias, AlibiBias) == (decoder == "alibi")
    assert (model.encoder_layers[0].self_attn.rotary is not None) == (encoder == "rope")
    assert (model.decoder_layers[0].self_attn.rotary is not None) == (decoder == "rope")
    src = torch.randint(1, VOCAB, (2, 5))
    assert torch.isfinite(model(src, src)).all()


@pytest.mark.parametrize(
    ("share", "src_is_tgt", "output_is_tgt"),
    [
        ("all", True, True),
        ("decoder", False, True),
        ("none", False, False),
    ],
)
def test_share_levels_build_their_tying(share, src_is_tgt, output_is_tgt):
    model = build(f"embedding.share={share}")
    embedding = model.embedding
    assert (embedding.src_tokens.weight is embedding.tgt_tokens.weight) == src_is_tgt
    assert (model.output_matrix is embedding.tgt_tokens.weight) == output_is_tgt
    matrices = 1 + (not src_is_tgt) + (not output_is_tgt)
    assert model.num_parameters() == build("embedding.share=all").num_parameters() + (
        matrices - 1
    ) * (VOCAB * 32)


@pytest.mark.parametrize(("init_std", "expected"), [("null", 32**-0.5), ("1.0", 1.0)])
def test_init_std_from_the_config(init_std, expected):
    model = build(f"embedding.init_std={init_std}", "embedding.share=none")
    for table in (model.embedding.src_tokens.weight, model.embedding.tgt_tokens.weight):
        assert table[1:].std().item() == pytest.approx(expected, rel=0.05)  # ~9,600 draws
    assert model.output_weight.std().item() == pytest.approx(32**-0.5, rel=0.05)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["pe.encoder=rotary"], ["pe.encoder", "sinusoidal", "alibi"]),
        (["pe.decoder=nope"], ["pe.decoder", "learned", "none"]),
        (["embedding.share=maybe"], ["embedding.share", "none, decoder, all"]),
        (["embedding.share=true"], ["embedding.share=True", "none, decoder, all", "true was all"]),
        (["embedding.share=false"], ["embedding.share=False", "false decoder"]),
        (["embedding.init_std=0"], ["embedding.init_std", "positive number"]),
        (["embedding.init_std=big"], ["embedding.init_std", "positive number"]),
        (["tokenizer.joint=false"], ["embedding.share=all", "tokenizer.joint=true"]),
        (["tokenizer.joint=false", "embedding.share=all"], ["embedding.share=all"]),
        (["pe.decoder=rope", "model.d_model=12"], ["pe.decoder", "must be even", "12 / 4"]),
        (["pe=rope", "model.d_model=12"], ["pe.encoder, pe.decoder", "12 / 4"]),
    ],
)
def test_bad_embedding_values_name_the_key_and_the_choices(overrides, named):
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config(*SMALL, *overrides))
    for text in named:
        assert text in str(error.value)


@pytest.mark.parametrize(
    "overrides",
    [
        ["tokenizer.joint=false", "embedding.share=decoder"],
        ["tokenizer.joint=false", "embedding.share=none"],
        ["pe=alibi", "model.n_heads=3", "model.d_model=36"],  # any head count, odd head size
        ["embedding.init_std=0.05"],
    ],
)
def test_valid_embedding_values_validate(overrides):
    validate_config(compose_config(*SMALL, *overrides))


def test_pe_init_std_sets_the_learned_table_s_init_std():
    tables = [
        build("pe=learned", f"pe.init_std={std}").embedding.positions.table.weight
        for std in (0.02, 0.5)
    ]
    # 256 x 32 draws: the sample std is within 5% of the configured one
    assert tables[0].std().item() == pytest.approx(0.02, rel=0.05)
    assert tables[1].std().item() == pytest.approx(0.5, rel=0.05)
    assert compose_config("pe=learned").pe.init_std == 0.7071  # the sinusoid's RMS, the default


def test_pe_scale_multiplies_the_sinusoidal_table():
    plain = build().embedding.positions.table
    scaled = build("pe.scale=0.125").embedding.positions.table
    torch.testing.assert_close(scaled, 0.125 * plain, rtol=0, atol=0)
    assert compose_config().pe.scale == 1.0


def test_an_option_given_relative_to_d_model_resolves_against_it():
    cfg = compose_config("experiment=study_cpu", "arm=fairseq_learned")
    assert cfg.pe.init_std == 128**-0.5
    cfg = compose_config("experiment=study_cpu", "arm=unscaled_small_sinusoidal")
    assert (cfg.pe.scale, cfg.embedding.scale) == (128**-0.5, False)


@pytest.mark.parametrize("key", ["pe.init_std", "pe.scale"])
@pytest.mark.parametrize("value", ["0", "-0.1", "large"])
def test_a_bad_positional_option_is_an_error_naming_the_key(key, value):
    pe = "pe=learned" if key == "pe.init_std" else "pe=sinusoidal"
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        validate_config(compose_config(*SMALL, pe, f"{key}={value}"))


def test_positional_options_reach_only_the_side_with_the_chosen_encoding():
    model = build("pe=learned", "pe.init_std=0.5", "pe.decoder=sinusoidal")
    assert model.embedding.src_positions.table.weight.std().item() == pytest.approx(0.5, rel=0.05)
    assert type(model.embedding.tgt_positions) is SinusoidalPositions


def test_a_positional_option_is_a_setting_a_resumed_run_must_keep():
    saved = OmegaConf.to_container(compose_config("pe=learned"))
    assert resume_mismatches(saved, compose_config("pe=learned", "pe.init_std=0.1")) == [
        "pe.init_std: checkpoint 0.7071, config 0.1"
    ]
    own = compose_config("pe=learned", "+pe.decoder_options.init_std=0.02")
    assert resume_mismatches(saved, own) == [
        "pe.decoder_options.init_std: checkpoint None, config 0.02"
    ]
    assert resume_mismatches(saved, compose_config("pe=learned")) == []


CONFIG_FILES = [
    (group, path.stem)
    for group in ("pe", "arm")
    for path in sorted((REPO / "configs" / group).glob("*.yaml"))
]


@pytest.mark.parametrize(("group", "name"), CONFIG_FILES, ids=[f"{g}={n}" for g, n in CONFIG_FILES])
def test_every_pe_and_arm_file_checks_and_builds_a_model(group, name):
    model = build(f"{group}={name}")
    src = torch.randint(4, VOCAB, (2, 6))
    assert torch.isfinite(model(src, src)).all()


def test_a_training_run_reads_each_side_s_encoding_once(tmp_path, monkeypatch):
    # The config check and the model share one reading of the pe section: an import path is
    # resolved once per side, not once by the check and again by the builder.
    resolved = []

    def counted(name: str) -> type:
        resolved.append(name)
        return encoding_class(name)

    monkeypatch.setattr(pe_section, "encoding_class", counted)
    overrides = "pe.decoder=learned", "trainer.max_steps=2", "views=false"
    cfg = compose_config(*toy_run_overrides(tmp_path / "data", *overrides))
    train(cfg, tmp_path / "run", [])
    assert resolved == ["sinusoidal", "learned"]
