"""A run's life: one writer at a time, finished only by training's end, metrics.json merged as
it is written, and tied to the training files its tokenizer and token ids came from."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys

import pytest

from minimt.checkpoint import CheckpointMismatch
from minimt.data.corpus import DataError, parallel_files
from minimt.data.tokenized import cached_token_pairs
from minimt.data.tokenizer import MIN_VOCAB_SIZE, TokenizerPair, build_tokenizers, train_bpe
from minimt.locks import LOCK_FILE, RunInUse, writing
from minimt.rundir import (
    finished_run,
    interrupted_run,
    keep_tokenizers,
    load_model,
    update_metrics,
)
from minimt.train.loop import train
from minimt.translator import Translator
from tests.helpers import ENV, TOY, compose_config, run_in_process, toy_run_overrides

EVAL = {"test.beam1.last": {"bleu": 1.0, "checkpoint": "last"}}


def write_step_checkpoint(run_dir, step):
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / f"step_{step}.pt").write_bytes(b"not read by these tests")


def test_an_interrupted_run_evaluated_is_still_interrupted_not_finished(tmp_path):
    write_step_checkpoint(tmp_path, 100)
    (tmp_path / "metrics.json").write_text(json.dumps({"eval": EVAL}))
    assert finished_run(tmp_path, compose_config("model.d_model=64")) is None
    assert interrupted_run(tmp_path)


def test_metrics_are_merged_with_what_the_file_holds_when_written(tmp_path):
    update_metrics(tmp_path, lambda m: m | {"eval": m.get("eval", {}) | EVAL})
    other = {"val.beam5.best": {"bleu": 2.0}}
    update_metrics(tmp_path, lambda m: m | {"eval": m.get("eval", {}) | other})
    assert json.loads((tmp_path / "metrics.json").read_text())["eval"] == EVAL | other
    assert not (tmp_path / LOCK_FILE).exists()


# A second command, holding a run: prints "held" once it does, then waits to be killed.
HOLDER = """
import sys, time
from minimt.locks import writing
with writing(sys.argv[1]):
    print("held", flush=True)
    time.sleep(600)
"""


@pytest.fixture
def held(tmp_path):
    """tmp_path/run held by another process (its pid); killed at the end."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run)], stdout=subprocess.PIPE, text=True, env=ENV
    )
    assert holder.stdout.readline() == "held\n"
    yield run, holder
    holder.kill()
    holder.wait()


@pytest.mark.parametrize(
    "script", ["evaluate.py", "average_checkpoints.py", "hparams.py", "train.py"]
)
def test_a_second_writer_is_refused_in_one_line_naming_the_first(held, script, capsys):
    run, holder = held
    argv = {"train.py": [f"hydra.run.dir={run}"]}.get(script, [f"run={run}"])
    status, _, _ = run_in_process(script, argv, capsys)
    assert isinstance(status, str) and status.startswith(f"error: {run} is in use by "), status
    assert f"(pid {holder.pid}, since " in status and "\n" not in status


def test_a_holder_that_died_blocks_no_one(held):
    run, holder = held
    with pytest.raises(RunInUse, match=f'"-c {run}"'):
        with writing(run):
            pass
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    assert (run / LOCK_FILE).exists()  # a kill -9 leaves the file, but not the lock
    with writing(run), writing(run):  # a process may enter its own hold again
        pass
    assert not (run / LOCK_FILE).exists()


def test_a_killed_preparations_folder_is_removed_by_the_next_and_a_live_ones_kept(tmp_path):
    token_ids = tmp_path / "token_ids"
    killed, live = token_ids / "tmpkilled", token_ids / "tmplive"
    for folder in (killed, live):
        folder.mkdir(parents=True)
        (folder / "text.arrow").write_bytes(b"half")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # another preparation, still at work
    try:
        corpus = parallel_files(TOY / "train.de", TOY / "train.en", limit=20)
        tokenizers = TokenizerPair(*[train_bpe(["ein Hund", "a dog"], MIN_VOCAB_SIZE)] * 2)
        assert len(cached_token_pairs(corpus, tokenizers, tmp_path)) == 20
    finally:
        os.close(fd)
    assert not killed.exists() and live.is_dir()


def test_a_runs_tokenizer_is_never_written_again_once_it_has_checkpoints(tmp_path):
    corpus = parallel_files(TOY / "train.de", TOY / "train.en")
    ours = build_tokenizers(corpus, MIN_VOCAB_SIZE + 20, True, tmp_path / "cache")
    other = build_tokenizers(corpus, MIN_VOCAB_SIZE + 30, True, tmp_path / "cache")
    run = tmp_path / "run"
    keep_tokenizers(run, ours)
    write_step_checkpoint(run, 10)
    before = (run / "tokenizer.json").stat()
    keep_tokenizers(run, TokenizerPair.load(run))  # the same: left as it is
    with pytest.raises(CheckpointMismatch, match=f"{run} holds checkpoints trained with"):
        keep_tokenizers(run, other)
    assert (run / "tokenizer.json").stat().st_mtime_ns == before.st_mtime_ns


def tiny_toy_run(corpus, *extra) -> list[str]:
    """A toy run of 10 updates, a step checkpoint every 5, on the training files in `corpus`."""
    toy = [o for o in toy_run_overrides(corpus / "cache") if not o.startswith("data.train.")]
    files = [f"data.train.{side}={corpus / f'train.{lang}'}" for side, lang in SIDES]
    quick = ["views=false", "data.max_val_pairs=10", "trainer.val_every=1000"]
    quick += ["trainer.max_steps=10", "trainer.save_every=5", "decoding.test_beam=1"]
    return [*toy, *files, *quick, *extra]


SIDES = (("src", "de"), ("tgt", "en"))


@pytest.fixture
def corpus(tmp_path):
    """A copy of the toy training files that a test may change."""
    for _, lang in SIDES:
        shutil.copy(TOY / f"train.{lang}", tmp_path / f"train.{lang}")
    return tmp_path


@pytest.mark.slow
def test_an_evaluated_interrupted_run_resumes_and_keeps_its_evaluations(
    corpus, capsys, monkeypatch
):
    run = corpus / "run"
    train(compose_config(*tiny_toy_run(corpus)), run)
    (run / "metrics.json").unlink()  # as if stopped after its last checkpoint
    translate = Translator.translate

    def meanwhile(self, *args, **kwargs):  # an entry added while the evaluation runs
        update_metrics(run, lambda m: m | {"eval": m.get("eval", {}) | EVAL})
        return translate(self, *args, **kwargs)

    monkeypatch.setattr(Translator, "translate", meanwhile)
    argv = [f"run={run}", "checkpoint=last", f"src={TOY}/test.de", f"ref={TOY}/test.en", "beam=1"]
    assert run_in_process("evaluate.py", argv, capsys)[0] is None
    monkeypatch.setattr(Translator, "translate", translate)
    status, out, err = run_in_process(
        "train.py", [*tiny_toy_run(corpus), f"hydra.run.dir={run}"], capsys
    )
    assert status is None, err[-3000:]
    assert f"resumed from {run / 'checkpoints' / 'step_10.pt'}" in out + err
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["finished"] is True and metrics["steps"] == 10
    assert sorted(metrics["eval"]) == ["test.beam1.last", "test.de.beam1.last"]


@pytest.mark.slow
def test_a_resume_on_changed_training_files_is_refused_and_the_tokenizer_kept(corpus):
    run = corpus / "run"
    train(compose_config(*tiny_toy_run(corpus)), run)
    tokenizer = (run / "tokenizer.json").read_bytes()
    for _, lang in SIDES:  # lines removed from the training files
        path = corpus / f"train.{lang}"
        path.write_text("".join(path.read_text().splitlines(keepends=True)[50:]))
    more = ("trainer.max_steps=20", f"resume={run}")
    with pytest.raises(DataError, match=r"train\.de, .*train\.en.*resume_new_data=true"):
        train(compose_config(*tiny_toy_run(corpus, *more)), run)
    assert (run / "tokenizer.json").read_bytes() == tokenizer
    metrics = train(compose_config(*tiny_toy_run(corpus, *more, "resume_new_data=true")), run)
    assert metrics["steps"] == 20 and metrics["data"]["train_pairs"] <= 350
    assert (run / "tokenizer.json").read_bytes() == tokenizer
    load_model(run, "step_10.pt")  # the checkpoints before still load with it
    assert load_model(run, "step_20.pt")[1].fingerprint == TokenizerPair.load(run).fingerprint
