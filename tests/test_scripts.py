"""The run-directory scripts in fresh processes: translate, evaluate, average_checkpoints."""

import json
import subprocess

import pytest
import torch

from tests.helpers import run_script

pytestmark = pytest.mark.slow  # real training runs


def script(name: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    return run_script(f"{name}.py", *args, stdin=stdin, timeout=300)


def test_translate_keeps_line_alignment_with_empty_lines(smoke_run):
    run_dir, _ = smoke_run
    text = "Ein Hund rennt über eine Wiese.\n\nZwei Männer spielen Fußball.\n".encode()
    result = script("translate", f"run={run_dir}", stdin=text)
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().split("\n")
    assert len(lines) == 4 and lines[3] == ""  # three lines, each ending in a newline
    assert lines[1] == "" and lines[0] and lines[2]


def test_translate_in_a_fresh_process_matches_the_in_training_decoder(
    smoke_run, multi30k_dir, tmp_path
):
    run_dir, metrics = smoke_run
    result = metrics["test"]["test_2016_flickr"]
    source = tmp_path / "test.de"
    subprocess.run(f"zcat {multi30k_dir}/test_2016_flickr.de.gz > {source}", shell=True, check=True)
    out = tmp_path / "test.hyp.en"
    done = script(
        "translate",
        f"run={run_dir}",
        f"input={source}",
        f"output={out}",
        f"beam={result['beam']}",
        f"length_penalty={result['length_penalty']}",
    )
    assert done.returncode == 0, done.stderr.decode()
    assert out.read_text() == (run_dir / "hyps.test_2016_flickr.txt").read_text()


def test_translate_names_a_line_that_is_not_utf8(smoke_run):
    run_dir, _ = smoke_run
    result = script("translate", f"run={run_dir}", stdin=b"Ein Hund.\nkaputt \xff\n")
    assert result.returncode != 0 and b"stdin line 2 is not valid UTF-8" in result.stderr


def test_translate_rejects_an_unknown_argument(smoke_run):
    run_dir, _ = smoke_run
    result = script("translate", f"run={run_dir}", "beem=5", stdin=b"")
    assert result.returncode != 0 and b"beem" in result.stderr


def test_evaluate_prints_the_table_and_appends_metrics(run_copy):
    run_dir = run_copy  # test_2017_mscoco: the smallest test set (461 pairs)
    result = script("evaluate", f"run={run_dir}", "split=[val,test_2017_mscoco]", "beam=[1,2]")
    assert result.returncode == 0, result.stderr.decode()
    stdout = result.stdout.decode()
    assert "nrefs:1" in stdout and stdout.count("best") == 4
    evaluated = json.loads((run_dir / "metrics.json").read_text())["eval"]
    for key in ("val.beam1.best", "val.beam2.best", "test_2017_mscoco.beam1.best"):
        assert 0 <= evaluated[key]["bleu"] <= 100 and "nrefs:1" in evaluated[key]["signature"]
    hyps = "hyps/test_2017_mscoco.beam2.best.txt"
    assert (run_dir / hyps).is_file() and evaluated["test_2017_mscoco.beam2.best"]["hyps"] == hyps
    assert "averaged_from" not in evaluated["val.beam1.best"]


def test_averaged_checkpoint_is_written_and_evaluated(run_copy):
    run_dir = run_copy
    result = script("average_checkpoints", f"run={run_dir}", "last=3")
    assert result.returncode == 0, result.stderr.decode()
    averaged = torch.load(run_dir / "checkpoints" / "averaged.pt", weights_only=True)
    assert averaged["averaged_from"] == ["step_75.pt", "step_100.pt", "step_120.pt"]
    result = script(
        "evaluate", f"run={run_dir}", "checkpoint=averaged", "split=[test_2017_mscoco]", "beam=1"
    )
    assert result.returncode == 0, result.stderr.decode()
    evaluated = json.loads((run_dir / "metrics.json").read_text())["eval"]
    averaged_entry = evaluated["test_2017_mscoco.beam1.averaged"]
    assert averaged_entry["averaged_from"] == ["step_75.pt", "step_100.pt", "step_120.pt"]
    assert averaged_entry["hyps"] == "hyps/test_2017_mscoco.beam1.averaged.txt"


def test_time_to_bleu_reads_the_run_and_a_peer_side_by_side(smoke_run, run_copy, tmp_path):
    run_dir, metrics = run_copy, smoke_run[1]
    history = metrics["val_history"]
    assert all(0 < h["seconds"] <= metrics["train_seconds"] for h in history)
    assert [h["seconds"] for h in history] == sorted(h["seconds"] for h in history)
    peer = tmp_path / "results.json"
    peer.write_text(json.dumps({"val_curve": [{"step": 100, "seconds": 90.0, "bleu": 1.5}]}))
    done = script("bench/time_to_bleu", f"run={run_dir}", f"peer={peer}", "marks=[1,1000]")
    assert done.returncode == 0, done.stderr.decode()
    table = json.loads((run_dir / "time_to_bleu.json").read_text())["at_minutes"]
    assert table["1"]["joeynmt"] is None and table["1000"]["joeynmt"] == 1.5
    assert table["1000"]["minimt"] == history[-1]["bleu"]
    assert (run_dir / "time_to_bleu.png").stat().st_size > 0


def test_time_to_bleu_names_a_file_without_a_curve(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
    done = script("bench/time_to_bleu", f"run={tmp_path}")
    assert done.returncode != 0 and b"val_history" in done.stderr
