"""Every config key given a value of another type or out of range, as a user's typo would.

The run either trains, or stops before any work with one ConfigError that names the key.
"""

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st
from omegaconf import DictConfig, OmegaConf

from minimt.config import build_model, validate_config
from minimt.errors import MinimtError
from minimt.train.loop import train
from tests.helpers import compose_config, fuzz_settings, tiny_run_overrides

# Small numbers only: a drawn size must not make a run that takes minutes or gigabytes.
BAD_VALUES = st.sampled_from(
    ["abc", "", "1e3", -1, 0, 1, 2, 3, 0.5, 1.5, -0.5, None, True, False, [], [1, 2], ["x"]]
)


def leaf_keys(node, prefix: str = "") -> list[str]:
    keys = []
    for key in node:
        child = node._get_node(key)
        if OmegaConf.is_dict(child):
            keys += leaf_keys(child, f"{prefix}{key}.")
        else:
            keys.append(f"{prefix}{key}")
    return keys


SMOKE = compose_config("experiment=smoke")
# data.url and data.dir are paths: tests/test_cli.py gives them bad ones.
KEYS = [key for key in leaf_keys(SMOKE) if key not in ("data.url", "data.dir")]


def with_value(cfg: DictConfig, key: str, value) -> DictConfig:
    cfg = copy.deepcopy(cfg)
    OmegaConf.update(cfg, key, value, force_add=True)
    return cfg


@fuzz_settings(examples=150)
@given(key=st.sampled_from(KEYS), value=BAD_VALUES)
def test_a_bad_value_is_refused_naming_its_key_or_builds_a_model(key, value):
    cfg = with_value(SMOKE, key, value)
    try:
        validate_config(cfg)
    except MinimtError as error:
        assert key in str(error), (key, value, str(error))
    else:
        build_model(cfg, 300, 300)


@pytest.mark.slow
@fuzz_settings(examples=12)
@given(key=st.sampled_from(KEYS), value=BAD_VALUES)
def test_a_bad_value_is_refused_naming_its_key_or_trains(
    multi30k_dir, tmp_path_factory, key, value
):
    root = tmp_path_factory.mktemp("config")
    overrides = tiny_run_overrides(multi30k_dir, root / "data", "trainer.max_steps=2")
    tiny = compose_config(*overrides, "views=false", "data.max_val_pairs=5")
    cfg = with_value(tiny, key, value)
    try:
        train(cfg, root / "run")
    except MinimtError as error:
        assert key in str(error), (key, value, str(error))
