"""The key=value scripts stopped or failing part-way: Ctrl-C or SIGTERM ends each with one line
and exit status 130 or 143, no output file half-written and no temp file; a failed write (a full
disk, no permission, a read-only filesystem, a file where a folder should be) ends it with one
line naming the file and what is intact; `--help` prints usage to stdout and exits 0."""

import errno
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from minimt import atomic
from minimt.signals import Terminated, interrupted_line, stop_signals_raise
from minimt.train.loop import train
from scripts import average_checkpoints, collect_runs, evaluate, report, translate
from tests.helpers import ENV, REPO, compose_config, tiny_run_overrides, write_run

SCRIPTS = [translate, evaluate, average_checkpoints, report, collect_runs]
STATUS = {signal.SIGINT: 130, signal.SIGTERM: 143}
SOURCES = "Ein Hund rennt.\nZwei Katzen schlafen.\n"


@pytest.fixture(scope="module")
def run(multi30k_dir, tmp_path_factory) -> Path:
    """A run of 10 steps with step_5.pt and step_10.pt, shared by the tests that only read it."""
    root = tmp_path_factory.mktemp("tiny")
    cfg = compose_config(
        *tiny_run_overrides(multi30k_dir, root / "data", "trainer.max_steps=10", "views=false"),
        "trainer.save_every=5",
    )
    train(cfg, root / "run", [])
    return root / "run"


@pytest.fixture
def sweep(tmp_path) -> Path:
    """Two finished runs of one configuration, as training leaves them."""
    for seed in (1, 2):
        write_run(tmp_path / "sweep" / f"seed{seed}", "full_sinusoidal", seed)
    return tmp_path / "sweep"


@pytest.fixture
def sources(tmp_path) -> Path:
    path = tmp_path / "src.de"
    path.write_text(SOURCES)
    return path


def stop_at_write(monkeypatch, k: int, stop: Callable[[], None]) -> None:
    """Call `stop` at the k-th atomic write, once its temp file is written, before it is renamed."""
    commit, calls = atomic._commit, []

    def stopped(tmp: Path, path: Path) -> None:
        calls.append(path)
        if len(calls) == k:
            stop()
        commit(tmp, path)

    monkeypatch.setattr(atomic, "_commit", stopped)


def run_main(script, argv: list[str], capsys) -> tuple[int | str, str, str]:
    """(exit status or message, stdout, stderr) of `script.main(argv)` in this process."""
    with pytest.raises(SystemExit) as exited:
        script.main(argv)
    out, err = capsys.readouterr()
    return exited.value.code, out, err


def temp_files(*folders: Path) -> list[Path]:
    return [p for folder in folders for p in folder.rglob(f"*{atomic.TEMP_SUFFIX}")]


# Interruptions: each script stopped by a real signal at a write; the file it was writing is absent


def translate_case(run, tmp_path, sources):
    out = tmp_path / "out.en"
    return translate, [f"run={run}", f"input={sources}", f"output={out}"], 1, [out]


def evaluate_case(run, tmp_path, sources):
    (tmp_path / "ref.en").write_text("A dog runs.\nTwo cats sleep.\n")
    args = [f"run={run}", f"src={sources}", f"ref={tmp_path / 'ref.en'}", "beam=1"]
    return evaluate, [*args, f"out={tmp_path / 'hyp.en'}"], 2, []  # stopped at metrics.json


def average_case(run, tmp_path, sources):
    return average_checkpoints, [f"run={run}", "last=2"], 1, [run / "checkpoints" / "averaged.pt"]


def report_case(sweep, tmp_path):
    out = tmp_path / "out"
    return report, [f"sweep={sweep}", f"out={out}"], 2, [out / "test_bleu.png", out / "report.md"]


def collect_case(sweep, tmp_path):
    dest = tmp_path / "dest"
    return collect_runs, [f"sweep={sweep}", f"dest={dest}"], 2, []  # at the first metrics.json


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", [translate_case, evaluate_case, average_case])
def test_a_signal_in_a_run_script_is_one_line_and_leaves_no_partial_file(
    case, signum, run, tmp_path, sources, monkeypatch, capsys
):
    metrics = (run / "metrics.json").read_bytes()
    script, argv, k, absent = case(run, tmp_path, sources)
    stop_at_write(monkeypatch, k, lambda: os.kill(os.getpid(), signum))
    status, _, err = run_main(script, argv, capsys)
    assert_interrupted(status, err, signum)
    assert not [path for path in absent if path.exists()]
    assert (run / "metrics.json").read_bytes() == metrics
    assert temp_files(run, tmp_path) == []


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
@pytest.mark.parametrize("case", [report_case, collect_case])
def test_a_signal_in_a_study_script_is_one_line_and_leaves_no_partial_file(
    case, signum, sweep, tmp_path, monkeypatch, capsys
):
    drawing = tmp_path / "system_temp"  # where the report draws its plots
    drawing.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(drawing))
    script, argv, k, absent = case(sweep, tmp_path)
    stop_at_write(monkeypatch, k, lambda: os.kill(os.getpid(), signum))
    status, _, err = run_main(script, argv, capsys)
    assert_interrupted(status, err, signum)
    assert not [path for path in absent if path.exists()]
    assert not list((tmp_path / "dest").rglob("metrics.json"))  # no run half-collected
    assert temp_files(tmp_path) == [] and list(drawing.iterdir()) == []


def assert_interrupted(status, err: str, signum: signal.Signals) -> None:
    assert status == STATUS[signum], err
    assert "Traceback" not in err, err
    assert err.endswith(interrupted_line(signum) + "\n"), err
    assert err.count("interrupted") == 1, err


def test_a_second_signal_while_the_first_unwinds_is_ignored_until_it_is_done():
    before = signal.getsignal(signal.SIGTERM)
    cleaned = False
    with pytest.raises(Terminated), stop_signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)
        finally:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C while a temp file is removed
            cleaned = True
    assert cleaned and signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum", STATUS, ids=lambda s: s.name)
def test_a_signal_from_outside_stops_translate_with_its_status(signum, run, tmp_path):
    fifo, out = tmp_path / "input.de", tmp_path / "out.en"
    os.mkfifo(fifo)
    command = [sys.executable, str(REPO / "scripts" / "translate.py"), f"run={run}"]
    process = subprocess.Popen(
        [*command, f"input={fifo}", f"output={out}"], stderr=subprocess.PIPE, env=ENV, text=True
    )
    writer = open_when_read(fifo, process)  # the model is loaded: it waits for its input
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    os.close(writer)
    assert_interrupted(process.returncode, err, signum)
    assert not out.exists() and temp_files(tmp_path) == []


def open_when_read(fifo: Path, process: subprocess.Popen, timeout: float = 60) -> int:
    """Open `fifo` for writing once `process` has opened it for reading."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as error:  # ENXIO: no reader yet
            assert error.errno == errno.ENXIO and process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "translate.py never opened its input"
            time.sleep(0.05)


# Write faults: one line naming the file, what happened and what is intact


def fail_writing(monkeypatch, name: str, code: int) -> None:
    """The atomic write of a file called `name` fails with `code` (raised at its rename)."""
    commit = atomic._commit

    def failing(tmp: Path, path: Path) -> None:
        if path.name == name:
            raise OSError(code, os.strerror(code), str(tmp))
        commit(tmp, path)

    monkeypatch.setattr(atomic, "_commit", failing)


FAULTS = [errno.ENOSPC, errno.EACCES, errno.EROFS]


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_a_failed_translate_output_names_it_and_keeps_the_old_one(
    code, run, tmp_path, sources, monkeypatch, capsys
):
    out = tmp_path / "out.en"
    out.write_text("the previous translation\n")
    fail_writing(monkeypatch, "out.en", code)
    line = write_error(translate, [f"run={run}", f"input={sources}", f"output={out}"], capsys)
    assert line.startswith(f"error: could not write {out}: {os.strerror(code)}"), line
    assert line.endswith(f"; output={out} was not written (a file already there is intact)")
    assert out.read_text() == "the previous translation\n" and temp_files(tmp_path) == []


def test_a_full_disk_under_translate_output_is_one_line(run, tmp_path, sources, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    out = tmp_path / "out.en"
    with pytest.MonkeyPatch.context() as patch:  # its temp file is a link to /dev/full
        patch.setattr(atomic.secrets, "token_hex", lambda _: "feedbeef")
        (tmp_path / f".out.en.feedbeef{atomic.TEMP_SUFFIX}").symlink_to("/dev/full")
        line = write_error(translate, [f"run={run}", f"input={sources}", f"output={out}"], capsys)
    assert re.fullmatch(
        rf"error: could not write {re.escape(str(out))}: No space left on device \([\d,.]+ MB "
        rf"free on the filesystem of {re.escape(str(tmp_path))}\); output=.* is intact\)",
        line,
    ), line
    assert not out.exists() and temp_files(tmp_path) == []


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
@pytest.mark.parametrize("name", ["report.csv", "test_bleu.png", "report.md"])
def test_a_failed_report_file_is_one_line_and_leaves_none_half_written(
    name, code, sweep, tmp_path, monkeypatch, capsys
):
    out = tmp_path / "out"
    fail_writing(monkeypatch, name, code)
    line = write_error(report, [f"sweep={sweep}", f"out={out}"], capsys)
    assert line.startswith(f"error: could not write {out / name}: {os.strerror(code)}"), line
    assert line.endswith(
        f"each file in {out} is its previous version or its new one, none half-written"
    )
    assert not (out / name).exists() and temp_files(tmp_path) == []


@pytest.mark.parametrize("code", FAULTS, ids=errno.errorcode.get)
def test_a_failed_copy_of_collect_runs_leaves_the_run_uncollected(
    code, sweep, tmp_path, monkeypatch, capsys
):
    dest = tmp_path / "dest"
    fail_writing(monkeypatch, "metrics.json", code)
    line = write_error(collect_runs, [f"sweep={sweep}", f"dest={dest}"], capsys)
    target = next(dest.rglob("config.yaml")).parent
    assert line.startswith(
        f"error: could not write {target / 'metrics.json'}: {os.strerror(code)}"
    ), line
    assert line.endswith(
        f"{target} has no metrics.json until collect_runs.py runs again; the other runs in "
        f"{dest} are intact"
    )
    assert not list(dest.rglob("metrics.json")) and temp_files(tmp_path) == []


def test_collecting_again_after_a_failed_copy_completes_the_run(sweep, tmp_path, monkeypatch):
    dest = tmp_path / "dest"
    with pytest.MonkeyPatch.context() as patch:
        fail_writing(patch, "metrics.json", errno.ENOSPC)
        with pytest.raises(atomic.WriteError):
            collect_runs.collect_runs(sweep, dest)
    statuses = [status for _, status in collect_runs.collect_runs(sweep, dest)]
    assert statuses == ["replaced", "copied"] and len(list(dest.rglob("metrics.json"))) == 2


@pytest.mark.parametrize(
    "script, argv",
    [
        (translate, lambda run, sources, blocked: [f"input={sources}", f"output={blocked}/o.en"]),
        (report, lambda run, sources, blocked: [f"out={blocked}"]),
        (collect_runs, lambda run, sources, blocked: [f"dest={blocked}"]),
    ],
    ids=["translate", "report", "collect_runs"],
)
def test_a_file_where_the_output_folder_should_be_is_named(
    script, argv, run, sweep, sources, tmp_path, capsys
):
    blocked = tmp_path / "a_file"
    blocked.write_text("not a folder")
    first = f"run={run}" if script is translate else f"sweep={sweep}"
    line = write_error(script, [first, *argv(run, sources, blocked)], capsys)
    assert f"({blocked} is a file, not a folder)" in line, line
    assert blocked.read_text() == "not a folder" and temp_files(tmp_path) == []


def write_error(script, argv: list[str], capsys) -> str:
    """The one `error: ...` line `script` ends on."""
    message, _, err = run_main(script, argv, capsys)
    assert isinstance(message, str) and message.startswith("error: "), (message, err)
    assert "\n" not in message and "Traceback" not in err, err
    return message


# --help


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.__name__.split(".")[-1])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_prints_usage_to_stdout_and_exits_0(script, flag, capsys):
    status, out, err = run_main(script, [flag], capsys)
    assert status == 0 and err == ""
    assert out == script.USAGE + "\n"
