"""A user's own corpus (data=parallel_text) through every script to the end: train (metrics.json,
HPARAMS), evaluate and translate, on the toy corpus committed under tests/data/toy."""

import contextlib
import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.helpers import TOY, run_script

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("toy")
    files = [
        f"data.{split}.{side}={TOY / f'{split}.{lang}'}"
        for split in ("train", "val", "test")
        for side, lang in (("src", "de"), ("tgt", "en"))
    ]
    done = run_script(
        "train.py",
        "experiment=smoke",
        "data=parallel_text",
        *files,
        f"data.dir={root / 'data'}",
        "tokenizer.vocab_size=400",
        "trainer.max_steps=40",
        "trainer.val_every=20",
        f"hydra.run.dir={root / 'run'}",
        stdin="",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return root / "run"


def test_a_parallel_text_run_writes_metrics_json_and_hparams(toy_run):
    metrics = json.loads((toy_run / "metrics.json").read_text())
    assert metrics["steps"] == 40 and set(metrics["test"]) == {"test"}
    assert 0 <= metrics["test"]["test"]["bleu"] <= 100
    hparams = False
    for path in toy_run.glob("events.out.tfevents*"):
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        with contextlib.suppress(KeyError):  # raised by the event files without hparams
            hparams |= bool(accumulator.PluginTagToContent("hparams"))
    assert hparams


def test_evaluate_scores_a_parallel_text_run_on_its_own_test_set(toy_run):
    done = run_script("evaluate.py", f"run={toy_run}", "beam=[1,2]", stdin="")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "nrefs:1" in done.stdout
    evaluated = json.loads((toy_run / "metrics.json").read_text())["eval"]
    assert {"test.beam1.best", "test.beam2.best"} <= set(evaluated)


def test_evaluate_names_the_splits_a_parallel_text_run_has(toy_run):
    done = run_script("evaluate.py", f"run={toy_run}", "split=[test_2016_flickr]", stdin="")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "test_2016_flickr" in done.stderr and "val, test" in done.stderr


def test_translate_a_parallel_text_run(toy_run):
    done = run_script("translate.py", f"run={toy_run}", stdin="Ein Hund läuft im Park.\n\n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 2 and done.stdout.splitlines()[1] == ""
