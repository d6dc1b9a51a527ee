import json

import pytest
import torch

from minimt.atomic import atomic_write
from minimt.checkpoint import (
    average_state_dicts,
    load_checkpoint,
    remove_old_checkpoints,
    save_checkpoint,
    save_json,
    step_checkpoints,
)
from tests.helpers import tiny_transformer


def test_checkpoint_round_trip(tmp_path):
    saved = {"model": {"w": torch.arange(6.0).view(2, 3)}, "state": {"step": 7, "history": [1.5]}}
    save_checkpoint(tmp_path / "c.pt", saved)
    loaded = load_checkpoint(tmp_path / "c.pt")
    assert (
        torch.equal(loaded["model"]["w"], saved["model"]["w"]) and loaded["state"] == saved["state"]
    )


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path):
    path = tmp_path / "metrics.json"
    save_json(path, {"steps": 1})

    with pytest.raises(OSError, match="disk full"), atomic_write(path) as tmp:
        tmp.write_text('{"steps": ')
        raise OSError("disk full")
    assert json.loads(path.read_text()) == {"steps": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


def test_loading_refuses_pickled_code(tmp_path):
    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    torch.save({"x": Evil()}, tmp_path / "evil.pt")
    with pytest.raises(Exception, match="[Ww]eights only"):
        load_checkpoint(tmp_path / "evil.pt")


def test_missing_checkpoint_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.pt"):
        load_checkpoint(tmp_path / "nope.pt")


def test_rotation_keeps_the_newest_numbered_checkpoints(tmp_path):
    for step in (100, 200, 300, 1000, 50):
        save_checkpoint(tmp_path / f"step_{step}.pt", {"step": step})
    remove_old_checkpoints(tmp_path, keep=2)
    assert [p.name for p in step_checkpoints(tmp_path)] == ["step_300.pt", "step_1000.pt"]
    remove_old_checkpoints(tmp_path, keep=0)  # the newest one is never deleted
    assert [p.name for p in step_checkpoints(tmp_path)] == ["step_1000.pt"]


def test_average_of_state_dicts_and_tying_survive_loading():
    models = [tiny_transformer(30, seed) for seed in range(3)]
    tables = [m.embedding.src_tokens.weight.detach().double() for m in models]
    expected = (sum(tables) / 3).float()
    models[0].load_state_dict(average_state_dicts([m.state_dict() for m in models]))
    emb = models[0].embedding
    assert emb.src_tokens.weight is emb.tgt_tokens.weight
    torch.testing.assert_close(emb.src_tokens.weight.detach(), expected)


def test_averaging_nothing_is_an_error():
    with pytest.raises(ValueError, match="no checkpoints"):
        average_state_dicts([])
