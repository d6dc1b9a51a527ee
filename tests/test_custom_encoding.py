"""An encoding defined outside the package, of each kind (adds to the input, rotates queries and
keys, biases attention logits), is one class and one registry entry: it trains through the real
loop and shows in the TensorBoard views."""

import math

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from torch import Tensor

from minimt.config import ConfigError, validate_config
from minimt.model.embedding import POSITIONAL_ENCODINGS, PositionalEncoding
from minimt.study.views import study_hooks
from minimt.train.loop import train
from tests.helpers import compose_config, tiny_run_overrides, tiny_transformer


class BinaryPositions(PositionalEncoding):
    """Adds each position's binary digits as +-scale in the first log2(max_seq_len) dimensions."""

    def __init__(self, max_seq_len: int, d_model: int, n_heads: int = 1, scale: float = 0.5):
        super().__init__(max_seq_len, d_model, n_heads)
        bits = min(d_model, math.ceil(math.log2(max_seq_len)))
        digits = (torch.arange(max_seq_len)[:, None] >> torch.arange(bits)) & 1  # (L, bits)
        table = torch.zeros(max_seq_len, d_model)
        table[:, :bits] = scale * (2.0 * digits - 1)
        self.register_buffer("table", table, persistent=False)

    def add(self, x: Tensor, offset: int) -> Tensor:
        return x + self.table[offset : offset + x.size(1)]


class ReversedRotary(PositionalEncoding):
    """Turns each query and key by minus its position (radians) in every pair of dimensions."""

    def rotate(self, x: Tensor, offset: int) -> Tensor:
        angle = -torch.arange(offset, offset + x.size(-2), dtype=x.dtype)[:, None]  # (L, 1)
        x1, x2 = x.chunk(2, dim=-1)
        cos, sin = angle.cos(), angle.sin()
        return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)

    @staticmethod
    def problem(d_model: int, n_heads: int) -> str | None:
        return "needs an even head size" if (d_model // n_heads) % 2 else None


class DistancePenalty(PositionalEncoding):
    """Biases every head's logits by -|i - j| / 4 (and hides later keys when causal)."""

    def bias(self, n_queries: int, n_keys: int, offset: int = 0, causal: bool = False) -> Tensor:
        query = torch.arange(offset, offset + n_queries)[:, None]
        distance = (query - torch.arange(n_keys)).float()  # (T, S)
        bias = (-distance.abs() / 4)[None]  # (1, T, S): one row for every head
        return bias.masked_fill(distance < 0, -math.inf) if causal else bias


KINDS = {"binary": BinaryPositions, "reversed": ReversedRotary, "penalty": DistancePenalty}


@pytest.fixture(params=sorted(KINDS))
def registered(request, monkeypatch) -> str:
    monkeypatch.setitem(POSITIONAL_ENCODINGS, request.param, KINDS[request.param])
    return request.param


def test_the_model_asks_the_encoding_what_it_does(registered):
    model = tiny_transformer(50, pos_encoding=registered)
    encoding = model.embedding.src_positions
    assert type(encoding) is KINDS[registered]
    assert (model.encoder_layers[0].self_attn.rotary is encoding) == (registered == "reversed")
    assert (model.encoder_bias is encoding) == (registered == "penalty")
    src = torch.randint(1, 50, (2, 7))
    assert torch.isfinite(model(src, src)).all()


def test_an_outside_encoding_trains_and_shows_in_the_views(registered, multi30k_dir, tmp_path):
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.max_steps=6"),
        "pe=none",
        f"pe.encoder={registered}",
        f"pe.decoder={registered}",
        "trainer.val_every=3",
        "views=true",
    )
    metrics = train(cfg, tmp_path / "run", study_hooks(cfg))
    assert metrics["steps"] == 6 and math.isfinite(metrics["val_history"][-1]["loss"])
    events = EventAccumulator(str(tmp_path / "run"))
    events.Reload()
    images = set(events.Tags()["images"])
    adds = registered == "binary"
    assert ("positions/table" in images) == adds
    assert any(tag.startswith("cross_attention/") for tag in images)
    magnitudes = metrics["input_magnitudes"]["best"]["src"]
    assert (magnitudes["ratio"] is not None) == adds


def test_an_outside_encoding_s_own_check_names_the_keys(monkeypatch):
    monkeypatch.setitem(POSITIONAL_ENCODINGS, "reversed", ReversedRotary)
    overrides = ("pe=none", "pe.encoder=reversed", "pe.decoder=reversed", "model.d_model=12")
    overrides += ("model.n_heads=4",)
    with pytest.raises(ConfigError, match=r"pe=reversed \(pe.encoder, pe.decoder\) needs an even"):
        validate_config(compose_config(*overrides))
