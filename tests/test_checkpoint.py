import errno
import json

import pytest
import torch
from omegaconf import OmegaConf

from minimt.atomic import atomic_write, remove_temp_files
from minimt.checkpoint import (
    CheckpointError,
    CheckpointMismatch,
    average_state_dicts,
    config_mismatches,
    load_checkpoint,
    load_weights,
    remove_old_checkpoints,
    resume_checkpoint,
    run_dir_of,
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


def test_a_full_disk_keeps_the_previous_checkpoint_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "step_10.pt"
    save_checkpoint(path, {"state": {"step": 10}})

    def write_half_then_fail(obj, file):
        file.write(b"PK\x03\x04 half a zip")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(torch, "save", write_half_then_fail)
    with pytest.raises(CheckpointError, match=r"step_10\.pt: No space left on device.*intact"):
        save_checkpoint(path, {"state": {"step": 20}})
    monkeypatch.undo()
    assert load_checkpoint(path)["state"] == {"step": 10}
    assert [p.name for p in tmp_path.iterdir()] == ["step_10.pt"]


def test_a_truncated_checkpoint_is_a_clear_error(tmp_path):
    path = tmp_path / "step_5.pt"
    save_checkpoint(path, {"model": {"w": torch.zeros(1000)}})
    path.write_bytes(path.read_bytes()[:500])
    with pytest.raises(CheckpointError, match=r"cannot load checkpoint .*step_5\.pt"):
        load_checkpoint(path)


def test_weights_that_do_not_fit_name_the_parameter_and_shapes():
    saved = tiny_transformer(50).state_dict()
    with pytest.raises(CheckpointMismatch, match=r"tgt_tokens\.weight: checkpoint \(50, 16\), "):
        load_weights(tiny_transformer(60), saved, "step_5.pt")
    deeper = tiny_transformer(50, n_encoder_layers=3)
    with pytest.raises(
        CheckpointMismatch, match=r"encoder_layers\.2\..*missing from the checkpoint"
    ):
        load_weights(deeper, saved, "step_5.pt")


def test_config_mismatches_name_each_field():
    saved = {"model": {"d_model": 256, "n_heads": 4}, "pe": {"encoder": "learned"}}
    cfg = OmegaConf.create(
        {"model": {"d_model": 128, "n_heads": 4}, "pe": {"encoder": "sinusoidal"}}
    )
    keys = ("model.d_model", "model.n_heads", "pe.encoder")
    assert config_mismatches(saved, cfg, keys) == [
        "model.d_model: checkpoint 256, config 128",
        "pe.encoder: checkpoint 'learned', config 'sinusoidal'",
    ]


def test_resume_takes_a_run_directory_or_a_checkpoint_file(tmp_path):
    ckpts = tmp_path / "run" / "checkpoints"
    for step in (5, 40, 100):
        save_checkpoint(ckpts / f"step_{step}.pt", {"state": {"step": step}})
    assert resume_checkpoint(tmp_path / "run") == ckpts / "step_100.pt"
    assert resume_checkpoint(ckpts / "step_40.pt") == ckpts / "step_40.pt"
    assert run_dir_of(ckpts / "step_40.pt") == run_dir_of(tmp_path / "run") == tmp_path / "run"
    with pytest.raises(FileNotFoundError, match="no such run directory or checkpoint"):
        resume_checkpoint(tmp_path / "elsewhere")
    (tmp_path / "empty" / "checkpoints").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="before its first save"):
        resume_checkpoint(tmp_path / "empty")


def test_temp_files_of_killed_writes_are_cleared(tmp_path):
    save_checkpoint(tmp_path / "step_1.pt", {"state": {}})
    (tmp_path / ".step_2.pt.1234abcd.tmp").write_bytes(b"half")
    assert [p.name for p in remove_temp_files(tmp_path)] == [".step_2.pt.1234abcd.tmp"]
    assert [p.name for p in tmp_path.iterdir()] == ["step_1.pt"]
