"""An encoding written outside the package (tests/plugins/my_encodings.py, one of each kind:
adds to the input, rotates queries and keys, biases attention logits) is chosen by its import
path: its options are checked against its signature, it trains through the real loop and shows
in the TensorBoard views; every encoding keeps its tensors on the model's device."""

import math
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from minimt.config import ConfigError, build_model, validate_config
from minimt.encoding_choice import EncodingChoice
from minimt.model.positions import BUILT_IN_ENCODINGS, PositionalEncoding
from minimt.study.views import study_hooks
from minimt.train.loop import train
from tests.helpers import compose_config, tiny_run_overrides, tiny_transformer

PLUGINS = Path(__file__).resolve().parent / "plugins"
KINDS = {  # what each outside class overrides
    "my_encodings.BinaryPositions": "add",
    "my_encodings.ReversedRotary": "rotate",
    "my_encodings.DistancePenalty": "bias",
}


@pytest.fixture(autouse=True)
def plugins_on_the_path(monkeypatch):
    """tests/plugins on sys.path, as PYTHONPATH=tests/plugins puts it for the scripts."""
    monkeypatch.syspath_prepend(str(PLUGINS))


def chosen(path: str, *extra: str) -> tuple[str, ...]:
    return ("pe=none", f"pe.encoder={path}", f"pe.decoder={path}", *extra)


@pytest.mark.parametrize("path", sorted(KINDS))
def test_the_model_asks_the_encoding_what_it_does(path):
    model = tiny_transformer(50, positions=EncodingChoice.of(path))
    encoding = model.embedding.src_positions
    assert f"{type(encoding).__module__}.{type(encoding).__name__}" == path
    assert (model.encoder_layers[0].self_attn.rotary is encoding) == (KINDS[path] == "rotate")
    assert (model.encoder_bias is encoding) == (KINDS[path] == "bias")
    src = torch.randint(1, 50, (2, 7))
    assert torch.isfinite(model(src, src)).all()


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(KINDS))
def test_an_outside_encoding_trains_and_shows_in_the_views(path, multi30k_dir, tmp_path):
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.max_steps=6"),
        *chosen(path),
        "trainer.val_every=3",
        "views=true",
    )
    metrics = train(cfg, tmp_path / "run", study_hooks(cfg))
    assert metrics["steps"] == 6 and math.isfinite(metrics["val_history"][-1]["loss"])
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    images = set(events.Tags()["images"])
    adds = KINDS[path] == "add"
    assert ("views/positions/table" in images) == adds
    assert any(tag.startswith("views/cross_attention/") for tag in images)
    magnitudes = metrics["input_magnitudes"]["best"]["src"]
    assert (magnitudes["ratio"] is not None) == adds


def config_error(*overrides: str) -> str:
    with pytest.raises(ConfigError) as raised:
        validate_config(compose_config(*overrides))
    return str(raised.value)


def test_an_outside_encoding_s_own_check_names_the_keys():
    message = config_error(
        *chosen("my_encodings.ReversedRotary"), "model.d_model=12", "model.n_heads=4"
    )
    assert "pe=my_encodings.ReversedRotary (pe.encoder, pe.decoder) needs an even" in message


def test_a_misspelt_option_names_the_key_the_class_and_its_options():
    message = config_error(*chosen("my_encodings.DistancePenalty"), "+pe.slop=0.5")
    assert "pe.slop is not an option of my_encodings.DistancePenalty (options: slope)" in message
    message = config_error("pe=learned", "+pe.scale=3.0")
    assert "pe.scale is not an option of minimt.model.positions.LearnedPositions" in message


def test_both_sides_replaced_on_the_command_line_leave_the_default_groups_option_behind():
    # the documented command: pe=sinusoidal's scale 1.0 stays in the section, and changes nothing
    sides = [f"pe.{side}=my_encodings.DistancePenalty" for side in ("encoder", "decoder")]
    validate_config(compose_config(*sides))
    message = config_error(*sides, "pe.scale=2.0")
    assert "pe.scale is not an option of my_encodings.DistancePenalty (options: slope)" in message


def test_an_option_left_behind_is_named_in_one_warning_line(caplog):
    sides = [f"pe.{side}=my_encodings.DistancePenalty" for side in ("encoder", "decoder")]
    with caplog.at_level("WARNING", logger="minimt"):
        validate_config(compose_config(*sides))
    assert caplog.messages == [
        "pe.scale=1.0, left by pe=sinusoidal, is not an option of "
        "my_encodings.DistancePenalty: ignored"
    ]
    caplog.clear()
    with caplog.at_level("WARNING", logger="minimt"):
        validate_config(compose_config("pe=sinusoidal"))
    assert caplog.messages == []


def test_a_config_group_of_ones_own_composes_and_validates():
    searchpath = f"hydra.searchpath=[file://{PLUGINS / 'configs'}]"
    cfg = compose_config(searchpath, "experiment=smoke", "arm=my_penalty", "pe.slope=0.5")
    validate_config(cfg)
    assert cfg.pe.encoder == "my_encodings.DistancePenalty" and cfg.pe.slope == 0.5


def test_a_method_on_an_older_contract_is_refused_before_any_work_naming_the_fix():
    message = config_error(*chosen("my_encodings.OlderContractBias"))
    assert (
        "my_encodings.OlderContractBias.bias cannot take the model's call "
        "bias(n_queries, n_keys, device=...) (got an unexpected keyword argument 'device'): "
        "give it the signature bias(self, n_queries, n_keys, offset=0, causal=False, *, "
        "device=None)"
    ) in message


def test_a_method_that_fails_on_a_tiny_input_is_refused_before_any_work():
    message = config_error(*chosen("my_encodings.BrokenAdd"))
    assert (
        "my_encodings.BrokenAdd.add fails on the model's call add(x, offset) on a tiny" in message
    )
    assert "RuntimeError: The size of tensor a" in message


def test_checking_the_contract_draws_no_random_number():
    state = torch.get_rng_state()
    validate_config(compose_config(*chosen("my_encodings.DistancePenalty")))
    validate_config(compose_config("pe=learned"))
    assert torch.equal(torch.get_rng_state(), state)


def test_a_value_of_the_wrong_type_or_refused_by_the_class_names_the_key():
    message = config_error(*chosen("my_encodings.BinaryPositions"), "+pe.scale=big")
    assert "pe.scale='big' must be a number for my_encodings.BinaryPositions" in message
    message = config_error(*chosen("my_encodings.BinaryPositions"), "+pe.scale=-1")
    assert "pe.scale=-1" in message and "scale must be positive, got -1" in message


@pytest.mark.parametrize(
    ("path", "said"),
    [
        ("my_encodings.NotAnEncoding", "is not a subclass of minimt.model.positions"),
        ("my_encodings.Missing", "my_encodings has no Missing"),
        ("nowhere_to_be_found.Encoding", "cannot import nowhere_to_be_found"),
        ("rotary", "'rotary' is neither a built-in encoding"),
    ],
)
def test_a_class_that_cannot_serve_is_refused_naming_pe_encoder(path, said):
    message = config_error(f"pe.encoder={path}")
    assert f"pe.encoder='{path}'" in message and said in message


def test_each_side_takes_its_own_options_and_equal_sides_share_one_module():
    cfg = compose_config("pe=learned", "+pe.decoder_options.init_std=0.02", "model.d_model=64")
    validate_config(cfg)
    torch.manual_seed(0)
    embedding = build_model(cfg, 300, 300).embedding
    assert embedding.src_positions.table.weight.std().item() == pytest.approx(0.7071, rel=0.05)
    assert embedding.tgt_positions.table.weight.std().item() == pytest.approx(0.02, rel=0.05)
    shared = build_model(compose_config("pe=learned", "model.d_model=64"), 300, 300).embedding
    assert "positions.table.weight" in shared.state_dict()
    assert shared.src_positions is shared.tgt_positions
    message = config_error("pe=learned", "+pe.encoder_options.slope=1.0")
    assert "pe.encoder_options.slope=1.0 is not an option of" in message


ALL_ENCODINGS = sorted(BUILT_IN_ENCODINGS) + sorted(KINDS)


@pytest.mark.parametrize("name", ALL_ENCODINGS)
def test_every_encoding_makes_its_tensors_on_the_device_of_its_inputs(name):
    """Built on the CPU, moved to the meta device, called with meta inputs: a tensor made
    without the device it was given (or its input's) would be a CPU tensor, and fail here."""
    encoding = EncodingChoice.of(name)(16, 8, 2).to("meta")
    assert isinstance(encoding, PositionalEncoding)
    x = torch.empty(2, 5, 8, device="meta")
    assert encoding.add(x, 3).device.type == "meta"
    heads = torch.empty(2, 2, 5, 4, device="meta")
    assert encoding.rotate(heads, 3).device.type == "meta"
    for causal in (False, True):
        bias = encoding.bias(5, 8, 3, causal, device=torch.device("meta"))
        assert bias is None or (bias.device.type == "meta" and bias.dtype == torch.float32)
