"""Runs that outlive the code: every frozen run in tests/data/old_runs, one per earlier run format,
each trained by its commit's own code (tests/frozen_runs.py), translates as that code did,
evaluates, averages, resumes and is read by report.py under today's code, or says in one line
why it cannot; and reading it never changes its files."""

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

from minimt.checkpoint import load_checkpoint, read_checkpoint
from minimt.migrations import RUN_FORMAT
from minimt.study.runs import load_run
from minimt.train.loop import train
from minimt.translator import Translator
from scripts.average_checkpoints import main as average
from scripts.evaluate import main as evaluate
from scripts.hparams import write_hparams
from scripts.report import main as report
from tests.helpers import OLD_RUNS, REPO, TOY, compose_config, todays_frozen_run

FORMATS = sorted(p.name for p in OLD_RUNS.iterdir() if (p / "built.json").is_file())


def built(name: str) -> dict:
    return json.loads((OLD_RUNS / name / "built.json").read_text())


def of_format(number: int) -> str:
    """The first frozen run of run format `number`."""
    return next(name for name in FORMATS if built(name)["format"] == number)


def files_of(run_dir: Path) -> dict[str, bytes]:
    return {str(p.relative_to(run_dir)): p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


@pytest.fixture
def old_run(request, tmp_path, monkeypatch) -> Path:
    """A copy of one frozen run, the repository root the working directory (its config names the
    toy corpus relative to it)."""
    monkeypatch.chdir(REPO)
    copy = tmp_path / request.param
    shutil.copytree(OLD_RUNS / request.param, copy)
    return copy


def test_every_run_format_has_a_frozen_run():
    formats = {built(name)["format"] for name in FORMATS}
    assert formats == set(range(1, RUN_FORMAT + 1))
    for name in FORMATS:
        assert Path(name).name.startswith(f"format_{built(name)['format']:02d}_"), name


@pytest.mark.parametrize("old_run", FORMATS, indirect=True)
def test_an_old_run_translates_as_its_own_code_did_and_is_left_as_it_was(old_run):
    record, before = built(old_run.name), files_of(old_run)
    translator = Translator.from_run(old_run, "best")
    for beam, expected in (record["translations"] or {}).items():
        assert translator.translate(record["sentences"], beam=int(beam)) == expected, beam
    config = load_checkpoint(old_run / "checkpoints" / "best.pt")["config"]
    composed = OmegaConf.to_container(compose_config(*today_overrides(record, old_run)))
    assert leaves(config) == leaves(composed)  # every key in today's spelling, no other
    assert files_of(old_run) == before


@pytest.mark.parametrize("old_run", FORMATS, indirect=True)
def test_an_old_run_evaluates_and_averages(old_run, capsys):
    evaluate([f"run={old_run}", f"src={TOY}/test.de", f"ref={TOY}/test.en", "beam=1"])
    assert "BLEU signature" in capsys.readouterr().out
    steps = sorted(old_run.glob("checkpoints/step_*.pt"))
    if len(steps) < 2:  # formats 1-2 saved best.pt and last.pt only
        with pytest.raises(SystemExit, match=r"^error: no numbered checkpoints \(step_<N>\.pt\)"):
            average([f"run={old_run}", "last=2"])
        return
    average([f"run={old_run}", "last=2"])
    averaged = read_checkpoint(old_run / "checkpoints" / "averaged.pt")
    assert averaged["format"] == RUN_FORMAT
    evaluate([f"run={old_run}", "checkpoint=averaged", f"src={TOY}/test.de", "beam=1"])


@pytest.mark.slow
@pytest.mark.parametrize("old_run", FORMATS, indirect=True)
def test_an_old_run_resumes_for_a_few_updates_and_saves_todays_format(old_run, caplog):
    record = built(old_run.name)
    saved = read_checkpoint(newest_progress(old_run))
    steps = saved["state"]["step"]
    overrides = today_overrides(record, old_run)
    cfg = compose_config(*overrides, f"resume={old_run}", f"trainer.max_steps={steps + 3}")
    with caplog.at_level(logging.INFO, logger="minimt"):
        metrics = train(cfg, old_run)
    assert metrics["steps"] == steps + 3 and metrics["format"] == RUN_FORMAT
    newest = read_checkpoint(old_run / "checkpoints" / f"step_{steps + 3}.pt")
    assert newest["format"] == RUN_FORMAT and "rng" in newest
    dated = re.search(r"was saved in run format (\d+) \(today's: (\d+)\)", caplog.text)
    if record["format"] < RUN_FORMAT:  # dated by its keys: its format or an earlier one alike
        assert dated and int(dated[1]) <= record["format"] and int(dated[2]) == RUN_FORMAT
    if "rng" not in saved:
        assert "cannot continue exactly: it saved no random state" in caplog.text


@pytest.mark.parametrize("old_run", [todays_frozen_run().name], indirect=True)
def test_resuming_names_every_setting_that_differs_from_the_checkpoints(old_run, caplog):
    overrides = today_overrides(built(old_run.name), old_run)
    cfg = compose_config(
        *overrides, f"resume={old_run}", "trainer.max_steps=301", "model.dropout=0.3"
    )
    with caplog.at_level(logging.WARNING, logger="minimt"):
        train(cfg, old_run)
    (line,) = [r.message for r in caplog.records if r.message.startswith("resuming with settings")]
    assert "model.dropout: checkpoint 0.1, config 0.3" in line
    assert "trainer.max_steps: checkpoint 300, config 301" in line


@pytest.mark.parametrize("old_run", FORMATS, indirect=True)
def test_report_reads_an_old_run(old_run, tmp_path):
    run, why = load_run(old_run, None)
    assert run is not None, why
    assert run.config.pe.encoder and run.metrics["format"] == RUN_FORMAT
    report([f"sweep={old_run.parent}", f"out={tmp_path / 'report'}"])
    assert (tmp_path / "report" / "report.md").is_file()


@pytest.mark.parametrize("old_run", [of_format(1), of_format(9)], indirect=True)
def test_an_old_runs_hparams_entry_is_written_again_in_todays_names(old_run):
    before = files_of(old_run)
    write_hparams(old_run)
    write_hparams(old_run)  # again: the folder is replaced, never doubled
    (event_file,) = (old_run / "hparams").iterdir()
    accumulator = EventAccumulator(str(event_file.parent))
    accumulator.Reload()
    content = accumulator.PluginTagToContent("hparams")["_hparams_/session_start_info"]
    row = HParamsPluginData.FromString(content).session_start_info.hparams
    config = load_checkpoint(old_run / "checkpoints" / "best.pt")["config"]
    assert row["pe.encoder"].string_value == config["pe"]["encoder"]
    assert row["model.d_model"].number_value == config["model"]["d_model"]
    assert row["embedding.share"].string_value == "all"  # saved as `true` by format 1
    assert {k: v for k, v in files_of(old_run).items() if not k.startswith("hparams/")} == before


def newest_progress(run_dir: Path) -> Path:
    """The checkpoint a resume continues from: last.pt in the oldest formats, else the newest
    step_<N>.pt."""
    last = run_dir / "checkpoints" / "last.pt"
    steps = sorted(run_dir.glob("checkpoints/step_*.pt"), key=lambda p: int(p.stem[5:]))
    return last if last.is_file() else steps[-1]


def today_overrides(record: dict, run_dir: Path) -> list[str]:
    """The command line the run trained with, as a user gives it today (a key its code lacked and
    it added, `+key=value`, is one of today's), in its own directory, with a tokenizer cache of
    its own."""
    kept = [o.lstrip("+") for o in record["train_overrides"] if not o.startswith("hydra.")]
    return [*kept, f"data.dir={run_dir.parent / 'data'}"]


def leaves(config: dict, prefix: str = "") -> set[str]:
    if not isinstance(config, dict):
        return {prefix}
    return {leaf for key, value in config.items() for leaf in leaves(value, f"{prefix}{key}.")}
