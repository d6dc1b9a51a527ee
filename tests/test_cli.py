"""The scripts' command line (minimt.cli): an error ends a script as one line on stderr with exit
status 1 and no traceback (HYDRA_FULL_ERROR=1 keeps it), an argument of the wrong type is named,
and `--help` prints usage to stdout and exits 0."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minimt.cli import one_line, one_line_errors
from minimt.errors import NotFound
from scripts import (
    average_checkpoints,
    collect_runs,
    evaluate,
    report,
    study,
    translate,
)
from tests.helpers import (
    ENV,
    REPO,
    error_line,
    run_in_process,
    run_script,
    script_command,
    todays_frozen_run,
)


def test_a_project_error_ends_the_script_as_one_line(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @one_line_errors
    def main():
        raise NotFound("bad things:\n  a.pt: missing\n  b.pt: cut short")

    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == "error: bad things: a.pt: missing; b.pt: cut short"


def test_the_full_error_switch_keeps_the_traceback(monkeypatch):
    monkeypatch.setenv("HYDRA_FULL_ERROR", "1")

    @one_line_errors
    def main():
        raise NotFound("bad things")

    with pytest.raises(NotFound, match="bad things"):
        main()


def test_a_bug_is_not_dressed_up_as_a_user_error(monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    with pytest.raises(ZeroDivisionError):
        one_line_errors(lambda: 1 / 0)()


def test_one_line_keeps_a_plain_message():
    assert one_line("no run directory at x") == "no run directory at x"


def into_closed_pipe(command: list[str], stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`command` run with its stdout a pipe whose reader quit before reading a byte (`| head -c
    0`, or `less` closed at once), block-buffered as in a user's shell; stderr captured."""
    env = {k: v for k, v in ENV.items() if k != "PYTHONUNBUFFERED"}
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run(
            command, input=stdin, stdout=write, stderr=subprocess.PIPE, env=env, cwd=REPO
        )
    finally:
        os.close(write)


@pytest.mark.parametrize(
    "output",
    ["print('x' * 1_000_000)", "print('one line')"],  # fails as written / in the final flush
    ids=["write", "flush"],
)
def test_a_reader_that_quit_ends_the_script_silently_with_141(output):
    program = f"from minimt.cli import one_line_errors\none_line_errors(lambda: {output})()"
    result = into_closed_pipe([sys.executable, "-c", program])
    assert result.returncode == 141 and result.stderr == b""


@pytest.mark.slow
def test_translate_into_a_pipe_whose_reader_quit_ends_silently():
    run = todays_frozen_run()  # read only
    result = into_closed_pipe(script_command("translate.py", f"run={run}"), b"Ein Hund rennt.\n")
    assert result.returncode == 141 and b"Error" not in result.stderr, result.stderr.decode()


@pytest.mark.slow
def test_full_error_shows_the_traceback_in_every_script(tmp_path):
    result = run_script("translate.py", f"run={tmp_path}", HYDRA_FULL_ERROR="1")
    assert result.returncode == 1 and b"Traceback" in result.stderr
    assert b"minimt.errors.NotFound: no run directory at" in result.stderr


@pytest.mark.slow
def test_train_script_reports_a_data_error_as_one_line(tmp_path):
    args = ["experiment=smoke", "data.url=/nonexistent/place", f"data.dir={tmp_path / 'data'}"]
    args.append(f"hydra.run.dir={tmp_path / 'run'}")
    line = error_line(run_script("train.py", *args))
    assert line.startswith("error: /nonexistent/place/") and "data.url" in line
    full = run_script("train.py", *args, HYDRA_FULL_ERROR="1")
    assert full.returncode == 1 and b"Traceback" in full.stderr


@pytest.mark.slow
def test_train_script_refuses_a_key_added_with_plus_before_any_work(tmp_path):
    args = ["experiment=smoke", "+trainer.max_step=10", f"hydra.run.dir={tmp_path / 'run'}"]
    line = error_line(run_script("train.py", *args))
    assert line.startswith("error: trainer.max_step is no setting of minimt (did you mean ")
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_evaluate_refuses_empty_files_naming_them_before_any_work(tmp_path, capsys):
    run = Path(shutil.copytree(todays_frozen_run(), tmp_path / "run"))
    before = (run / "metrics.json").read_bytes()
    src, ref = tmp_path / "empty.de", tmp_path / "empty.en"
    src.write_text("")
    ref.write_text("")
    status, out, _ = run_in_process(
        "evaluate.py", [f"run={run}", f"src={src}", f"ref={ref}"], capsys
    )
    assert status == (
        f"error: src={src} and ref={ref} have no lines: no sentence to score (BLEU and chrF "
        "need one)"
    )
    assert out == "" and not (run / "hyps").exists()
    assert (run / "metrics.json").read_bytes() == before


NO_CUDA = "device cuda asked for, but no CUDA device is available; use cpu"


@pytest.mark.parametrize("script", ["translate.py", "evaluate.py"])
def test_a_script_asked_for_cuda_without_one_ends_as_one_line(script, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    status, _, _ = run_in_process(script, [f"run={todays_frozen_run()}", "device=cuda"], capsys)
    assert status == f"error: {NO_CUDA}"


@pytest.mark.slow
def test_train_script_asked_for_cuda_without_one_ends_as_one_line(tmp_path):
    args = ["experiment=smoke", "trainer.device=cuda", f"hydra.run.dir={tmp_path / 'run'}"]
    no_cuda = "import torch\ntorch.cuda.is_available = lambda: False\n"
    assert error_line(run_script("train.py", *args, prelude=no_cuda)) == f"error: {NO_CUDA}"


@pytest.mark.parametrize(
    ("script", "argument", "named"),
    [
        ("translate", "run=-1", "run=-1 must be a path"),
        ("translate", "checkpoint=0", "checkpoint=0 must be a path"),
        ("translate", "input=1.5", "input=1.5 must be a path"),
        ("translate", "beam=0", "beam=0 must be an integer >= 1"),
        ("evaluate", "beam={a:1}", "beam={a:1}: arguments are key=value"),
        ("evaluate", "beam=[1,", "beam=[1,: arguments are key=value"),  # YAML cut short
        ("evaluate", "split=3", "split=3 must be a list of split names"),
        ("average_checkpoints", "last=abc", "last='abc' must be an integer >= 1"),
    ],
)
def test_a_script_argument_of_the_wrong_type_is_one_line_naming_it(script, argument, named, capsys):
    run = [] if argument.startswith("run=") else ["run=outputs/some-run"]
    status, _, _ = run_in_process(f"{script}.py", [*run, argument], capsys)
    assert str(status).startswith(f"error: {named}") and "\n" not in str(status)


SCRIPTS = [
    translate,
    evaluate,
    average_checkpoints,
    report,
    collect_runs,
    study,
]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.__name__.split(".")[-1])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_to_stdout_and_exits_0(script, flag, capsys):
    status, out, err = run_in_process(Path(script.__file__).name, [flag], capsys)
    assert status == 0 and err == ""
    assert out == script.USAGE + "\n"
