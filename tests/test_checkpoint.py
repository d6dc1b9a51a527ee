import json

import pytest
import torch

from minimt.atomic import atomic_write
from minimt.checkpoint import load_checkpoint, save_checkpoint, save_json


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
