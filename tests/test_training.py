"""The training run end to end on a few hundred real sentences, and its schedule."""

import contextlib
import json
import math
import subprocess
import sys

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from minimt.data.corpus import DataError
from minimt.data.splits import load_text_splits
from minimt.rundir import load_model
from minimt.train.evaluation import score
from minimt.train.loop import train
from minimt.train.step import inverse_sqrt_lr
from minimt.translator import Translator
from tests.helpers import REPO, compose_config


def test_inverse_sqrt_schedule_closed_form():
    warmup = 100
    factors = [inverse_sqrt_lr(step, warmup) for step in range(1000)]
    assert factors[0] == pytest.approx(1 / warmup)
    assert factors[49] == pytest.approx(0.5)
    assert factors[99] == pytest.approx(1.0) and max(factors) == pytest.approx(1.0)
    assert factors[399] == pytest.approx(0.5)  # sqrt(100 / 400)
    assert all(a < b for a, b in zip(factors[:99], factors[1:100], strict=True))
    assert all(a > b for a, b in zip(factors[99:-1], factors[100:], strict=True))


def scalars(run_dir):
    events = {}
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            events[tag] = [e.value for e in acc.Scalars(tag)]
    return events


@pytest.mark.slow
def test_smoke_run_writes_metrics_json(smoke_run):
    run_dir, metrics = smoke_run
    on_disk = json.loads((run_dir / "metrics.json").read_text())
    assert {key: on_disk[key] for key in metrics} == json.loads(json.dumps(metrics))
    assert on_disk["steps"] == 120 and on_disk["train_seconds"] > 0
    test = on_disk["test"]["test_2016_flickr"]
    assert 0 <= test["bleu"] <= 100 and "nrefs:1" in test["signature"]
    assert on_disk["best_val_bleu"] == max(v["bleu"] for v in on_disk["val_history"])
    assert len((run_dir / "hyps.test_2016_flickr.txt").read_text().splitlines()) == 1000


@pytest.mark.slow
def test_smoke_run_logs_the_tensorboard_tags_and_the_loss_falls(smoke_run):
    run_dir, _ = smoke_run
    tags = scalars(run_dir)
    need = {
        "train/loss",
        "train/lr",
        "train/grad_norm",
        "train/tokens_per_sec",
        "val/loss",
        "val/ppl",
        "val/bleu",
        "test/bleu",
    }
    assert need <= set(tags)
    losses = tags["train/loss"]
    assert losses[-1] < losses[0] - 1.0, losses
    assert all(math.isfinite(x) for x in losses)


@pytest.mark.slow
def test_smoke_run_writes_the_embedding_views(smoke_run):
    run_dir, _ = smoke_run
    images, hparams = set(), False
    for path in run_dir.glob("events.out.tfevents*"):
        acc = EventAccumulator(str(path))
        acc.Reload()
        images |= set(acc.Tags()["images"])
        with contextlib.suppress(KeyError):  # raised by the event files without hparams
            hparams |= bool(acc.PluginTagToContent("hparams"))
    assert {"positions/table", "positions/cosine_similarity"} <= images
    assert any(tag.startswith("cross_attention/") for tag in images) and hparams
    assert (run_dir / "projector_config.pbtxt").is_file()
    assert {"embedding/token_norm", "embedding/position_norm"} <= set(scalars(run_dir))


@pytest.mark.slow
def test_run_directory_rebuilds_the_model(smoke_run):
    run_dir, _ = smoke_run
    assert (run_dir / "tokenizer.json").is_file()
    model, tokenizers, _ = load_model(run_dir, "best")
    saved = torch.load(run_dir / "checkpoints" / "best.pt", weights_only=True)
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, saved["model"][name]), name
    emb = model.embedding
    assert emb.src_tokens.weight is emb.tgt_tokens.weight  # tying survives the reload
    assert tokenizers.src_vocab_size == model.embedding.src_tokens.num_embeddings


@pytest.mark.slow
def test_translator_from_the_run_directory_scores_what_the_log_says(smoke_run):
    run_dir, metrics = smoke_run
    result = metrics["test"]["test_2016_flickr"]
    translator = Translator.from_run(run_dir, "best")
    _, _, cfg = load_model(run_dir, "best")
    test_pairs = load_text_splits(cfg.data).tests["test_2016_flickr"]
    scores, hyps = score(translator, test_pairs, result["beam"], result["length_penalty"])
    assert scores.bleu == pytest.approx(result["bleu"])
    assert hyps == (run_dir / "hyps.test_2016_flickr.txt").read_text().splitlines()


def write_lines(path, lines):
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_parallel_text_reads_any_line_aligned_files(tmp_path):
    files = {
        f"{split}.{side}": write_lines(
            tmp_path / f"{split}.{side}", [f"{split} {side} {i}" for i in range(3)]
        )
        for split in ("train", "val", "test")
        for side in ("src", "tgt")
    }
    cfg = compose_config(
        "data=parallel_text", *(f"data.{name}={path}" for name, path in files.items())
    )
    splits = load_text_splits(cfg.data)
    assert list(splits.train.src_lines()) == ["train src 0", "train src 1", "train src 2"]
    assert list(splits.train.tgt_lines()) == ["train tgt 0", "train tgt 1", "train tgt 2"]
    assert list(splits.tests) == ["test"] and splits.tests["test"][1][2] == "test tgt 2"


def test_mismatched_line_counts_stop_before_training(tmp_path):
    src = write_lines(tmp_path / "train.de", ["a"] * 300)
    tgt = write_lines(tmp_path / "train.en", ["b"] * 299)
    paths = [
        f"data.{split}.{side}={path}"
        for split in ("train", "val", "test")
        for side, path in (("src", src), ("tgt", tgt))
    ]
    cfg = compose_config("experiment=smoke", "data=parallel_text", *paths)
    with pytest.raises(DataError) as error:
        train(cfg, tmp_path / "run")
    assert all(text in str(error.value) for text in ("300", "299", "train.de", "train.en"))
    assert not (tmp_path / "run" / "checkpoints").exists()


def run_cli(*args, timeout=120):
    return subprocess.run(
        [sys.executable, "scripts/train.py", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_rejects_an_unknown_positional_encoding_naming_the_choices(tmp_path):
    result = run_cli("pe=rotary", f"hydra.run.dir={tmp_path}")
    assert result.returncode != 0
    assert "sinusoidal" in result.stderr and "learned" in result.stderr


@pytest.mark.parametrize(
    ("override", "key"),
    [
        ("embedding.scale=maybe", "embedding.scale"),
        ("trainer.batch_tokens=-1", "trainer.batch_tokens"),
    ],
)
def test_cli_rejects_bad_values_before_any_work(tmp_path, override, key):
    result = run_cli(override, f"hydra.run.dir={tmp_path}/run", f"data.dir={tmp_path}/data")
    assert result.returncode != 0
    assert key in result.stdout + result.stderr
    assert not (tmp_path / "data").exists()  # stopped before fetching anything


def test_cli_names_a_missing_data_place(tmp_path):
    result = run_cli(
        "experiment=smoke",
        "data.url=/nonexistent/place",
        f"data.dir={tmp_path}/data",
        f"hydra.run.dir={tmp_path}/run",
    )
    assert result.returncode != 0
    assert "/nonexistent/place" in result.stdout + result.stderr
