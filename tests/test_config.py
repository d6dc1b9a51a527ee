import os

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from minimt.config import ConfigError, build_model, validate_config
from minimt.data import splits
from minimt.runtime import job_num_threads
from tests.helpers import REPO, compose_config, toy_run_overrides


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["pe=learned"],
        ["experiment=smoke", "pe=none"],
        ["experiment=smoke", "pe=rope"],
        ["embedding.scale=false"],
        ["embedding.share=decoder"],
        ["embedding.share=decoder", "tokenizer.joint=false"],
        ["model.norm_first=false"],
        ["experiment=smoke"],
        ["trainer.precision=fp32", "trainer.device=cpu"],
        ["trainer.adam_impl=for_loop", "trainer.prefetch=0", "trainer.compile=true"],
    ],
)
def test_every_option_composes_and_validates(overrides):
    validate_config(compose_config(*overrides))


def test_default_config_is_the_small_model_with_sinusoids_scaled_and_tied():
    cfg = compose_config()
    assert OmegaConf.to_container(cfg.model) == {
        "d_model": 256,
        "n_heads": 4,
        "n_encoder_layers": 3,
        "n_decoder_layers": 3,
        "d_ff": 1024,
        "dropout": 0.1,
        "attention_dropout": 0.0,
        "max_seq_len": 256,
        "norm_first": True,
    }
    assert cfg.pe.encoder == cfg.pe.decoder == "sinusoidal"
    assert cfg.embedding.scale is True and cfg.embedding.share == "all"
    assert cfg.embedding.init_std is None
    assert cfg.tokenizer.vocab_size == 8000 and cfg.trainer.batch_tokens == 4096


def test_data_url_reads_the_environment(monkeypatch):
    monkeypatch.setenv("MINIMT_DATA_URL", "/somewhere/multi30k")
    assert compose_config().data.url == "/somewhere/multi30k"
    monkeypatch.delenv("MINIMT_DATA_URL")
    assert compose_config().data.url.startswith(
        "https://raw.githubusercontent.com/multi30k/dataset"
    )


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("embedding.scale=maybe", ["embedding.scale", "true or false"]),
        ("embedding.share=1", ["embedding.share", "none, decoder, all"]),
        ("trainer.batch_tokens=-5", ["trainer.batch_tokens", "integer >= 1"]),
        ("tokenizer.vocab_size=100", ["tokenizer.vocab_size", ">= 260"]),
        ("pe.encoder=rotary", ["pe.encoder", "sinusoidal", "learned", "none", "rope"]),
        ("trainer.precision=fp16", ["trainer.precision", "bf16", "fp32"]),
        ("model.dropout=1.5", ["model.dropout", "[0, 1)"]),
        ("model.n_heads=3", ["model.d_model=256", "model.n_heads=3"]),
        ("tokenizer.joint=false", ["embedding.share=all", "tokenizer.joint=true"]),
        ("data.max_train_len=300", ["data.max_train_len", "model.max_seq_len"]),
        ("trainer.accumulate=0", ["trainer.accumulate", "integer >= 1"]),
        ("trainer.max_nonfinite_steps=0", ["trainer.max_nonfinite_steps", "integer >= 1"]),
        ("resume=5", ["resume", "path or null"]),
        ("trainer.adam_impl=apex", ["trainer.adam_impl", "fused", "foreach", "for_loop"]),
        ("trainer.prefetch=-1", ["trainer.prefetch", "integer >= 0"]),
        ("trainer.compile=yes", ["trainer.compile", "true or false"]),
        # found by tests/test_fuzz_config.py: each reached training and ended in a traceback
        ("trainer.betas=abc", ["trainer.betas", "[beta1, beta2]", "[0, 1)"]),
        ("trainer.betas=[0.9]", ["trainer.betas", "[beta1, beta2]"]),
        ("trainer.betas=[2,3]", ["trainer.betas", "[0, 1)"]),
        ("data.name=foo", ["data.name", "multi30k, parallel_text"]),
        ("data.test_sets=test_2016_flickr", ["data.test_sets", "list of split names"]),
        ("trainer.seed=true", ["trainer.seed", "an integer"]),
        ("resume=''", ["resume", "path or null"]),
    ],
)
def test_bad_values_name_the_key_and_the_choices(override, named):
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config(override))
    for text in named:
        assert text in str(error.value)


def test_a_null_positional_option_means_the_encoding_s_default():
    for encoding, option in (("sinusoidal", "scale"), ("learned", "init_std")):
        cfg = compose_config(f"pe={encoding}", "model.d_model=16", "model.d_ff=32")
        null = compose_config(
            f"pe={encoding}", "model.d_model=16", "model.d_ff=32", f"pe.{option}=null"
        )
        validate_config(null)
        torch.manual_seed(0)
        expected = build_model(cfg, 300, 300).state_dict()
        torch.manual_seed(0)
        got = build_model(null, 300, 300).state_dict()
        assert all(torch.equal(got[key], value) for key, value in expected.items())


def test_null_test_sets_means_none():
    cfg = compose_config("data.test_sets=null")
    validate_config(cfg)
    assert splits.test_set_names(cfg.data) == []  # imported by module: pytest collects test_*


def test_rope_needs_an_even_head_size():
    with pytest.raises(ConfigError, match=r"pe=rope.*model.d_model / model.n_heads.*12 / 4"):
        validate_config(compose_config("pe=rope", "model.d_model=12", "model.n_heads=4"))
    validate_config(compose_config("pe=sinusoidal", "model.d_model=12", "model.n_heads=4"))


def test_all_problems_are_reported_at_once():
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config("trainer.lr=0", "trainer.max_steps=0"))
    assert "trainer.lr" in str(error.value) and "trainer.max_steps" in str(error.value)


def test_parallel_text_without_paths_names_every_missing_key():
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config("data=parallel_text", "data.train.src=a.de"))
    message = str(error.value)
    assert "data.train.tgt must be set" in message and "data.test.src must be set" in message
    assert "data.train.src" not in message


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        (["+trainer.max_step=10"], "trainer.max_step is no setting of minimt (did you mean "),
        (["+trainer.max_step=null"], "trainer.max_step is no setting of minimt (did you mean "),
        (
            ["+model.dropuot=0.3"],
            "model.dropuot is no setting of minimt (did you mean model.dropout?)",
        ),
        (["+data.train.src=a.de"], "data.train.src is no setting of data=multi30k (only data="),
        (["+wandb.project=x"], "wandb.project is no setting of minimt; "),
    ],
)
def test_a_key_added_with_plus_that_nothing_reads_is_named_with_the_nearest_one(overrides, named):
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config("trainer.max_steps=20", *overrides))
    message = str(error.value)
    assert message.startswith(named) and "\n" not in message
    assert message.endswith("; python scripts/train.py --help lists every setting")


def test_every_unknown_key_is_named_at_once():
    with pytest.raises(ConfigError) as error:
        validate_config(compose_config("+trainer.max_step=10", "+trainer.warmup=5"))
    assert "trainer.max_step is" in str(error.value) and "trainer.warmup is" in str(error.value)


def test_a_corpus_of_ones_own_has_its_file_keys_known(tmp_path):
    validate_config(compose_config(*toy_run_overrides(tmp_path)))
    with pytest.raises(ConfigError, match="data.url is no setting of data=parallel_text"):
        validate_config(compose_config(*toy_run_overrides(tmp_path), "+data.url=/data"))


def test_the_benchmark_s_own_section_is_its_own():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("benchmark")
    validate_config(cfg, own_sections=("benchmark",))
    with pytest.raises(ConfigError, match="benchmark.warmup_steps is no setting of minimt"):
        validate_config(cfg)


def test_the_slurm_launcher_config_composes():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("submitit_launcher.SlurmLauncher")
    assert launcher.gpus_per_node == 1 and launcher.timeout_min > cfg.trainer.max_minutes


def test_the_parallel_launcher_composes_and_its_jobs_split_the_cores(monkeypatch):
    overrides = ["hydra/launcher=parallel", "hydra.launcher.n_jobs=4"]
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=overrides, return_hydra_config=True)
        plugin = compose("config", overrides=["hydra/launcher=joblib"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("joblib_launcher.JoblibLauncher")
    assert (
        cfg.hydra.launcher.n_jobs == 4
        and plugin.hydra.launcher._target_ == cfg.hydra.launcher._target_
    )
    # a job of that sweep on a 16-core machine
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", cfg)
    assert job_num_threads(None) == 4
    assert job_num_threads(3) == 3
    monkeypatch.setattr(HydraConfig.instance(), "cfg", plugin)  # the plugin's n_jobs: -1
    assert job_num_threads(None) == 1


def test_outside_a_parallel_launcher_torch_keeps_its_default_threads(monkeypatch):
    monkeypatch.setattr(HydraConfig.instance(), "cfg", None)  # not in a Hydra job
    assert job_num_threads(None) is None
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        basic = compose("config", return_hydra_config=True)
    monkeypatch.setattr(HydraConfig.instance(), "cfg", basic)  # Hydra's basic launcher
    assert job_num_threads(None) is None


def test_checking_a_config_leaves_the_random_streams_alone():
    """validate_config builds each encoding (a learned table draws its init) under a forked RNG:
    a run seeded before the check trains as one seeded after it."""
    torch.manual_seed(0)
    before = torch.get_rng_state()
    validate_config(compose_config("pe=learned"))
    assert torch.equal(torch.get_rng_state(), before)


# What a change of the default recipe may touch: each study protocol and the smoke runs (the
# golden test's) pin these, so that their records stay comparable whatever the defaults become.
RECIPE_KEYS = [
    "model.dropout",
    "model.attention_dropout",
    "model.d_ff",
    "model.n_encoder_layers",
    "model.n_decoder_layers",
    "model.norm_first",
    "trainer.label_smoothing",
    "trainer.weight_decay",
    "trainer.betas",
    "trainer.clip_grad_norm",
    "trainer.lr",
    "trainer.warmup_steps",
    "trainer.batch_tokens",
    "trainer.accumulate",
    "trainer.average_last",
    "trainer.adapt",
    "decoding.test_beam",
    "decoding.length_penalty",
]


@pytest.mark.parametrize("experiment", ["study", "study_cpu", "smoke"])
def test_each_protocol_pins_every_key_of_the_recipe(experiment):
    pinned = OmegaConf.load(REPO / "configs" / "experiment" / f"{experiment}.yaml")
    unpinned = [key for key in RECIPE_KEYS if OmegaConf.select(pinned, key, default="-") == "-"]
    assert unpinned == []
    composed = compose_config(f"experiment={experiment}")
    for key in RECIPE_KEYS:
        assert OmegaConf.select(composed, key) == OmegaConf.select(pinned, key), key
