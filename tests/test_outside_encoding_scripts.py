"""The whole loop of a researcher's own encoding, through the scripts in fresh processes: the
outside classes of tests/plugins/my_encodings.py, chosen by arm files of a config folder given
through hydra.searchpath, train beside full_sinusoidal, translate, evaluate (best and averaged)
and get an exploratory verdict from report.py; without their module on PYTHONPATH, a script
ends in one line naming it."""

import json

import pytest

from tests.helpers import REPO, run_script

pytestmark = pytest.mark.slow  # real training runs

PLUGINS = REPO / "tests" / "plugins"
ARMS = ("full_sinusoidal", "my_binary", "my_reversed", "my_penalty")


def script(name: str, *args: str, plugins: bool = True, stdin: bytes = b""):
    """The script in a fresh process, tests/plugins on its PYTHONPATH or (plugins=False) not."""
    return run_script(f"{name}.py", *args, stdin=stdin, PYTHONPATH=str(PLUGINS) if plugins else "")


@pytest.fixture(scope="module")
def sweep(multi30k_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("outside")
    result = script(
        "train",
        "-m",
        "hydra/launcher=parallel",  # two jobs at a time: the outside module in each worker too
        f"hydra.searchpath=[file://{PLUGINS / 'configs'}]",
        f"arm={','.join(ARMS)}",
        "trainer.seed=1,2",
        "experiment=smoke",
        f"data.url={multi30k_dir}",
        f"data.dir={root / 'data'}",
        "data.max_train_pairs=300",
        "data.max_val_pairs=10",
        "data.test_sets=[test_2016_flickr]",  # the one the report tests and evaluate scores
        "model.d_model=32",
        "model.d_ff=64",
        "trainer.precision=fp32",
        "trainer.max_steps=6",
        "trainer.val_every=3",
        "trainer.save_every=3",
        "trainer.average_last=2",
        "decoding.test_beam=1",
        "decoding.max_len_a=0",  # outputs of at most 4 tokens: an untrained model never stops
        "decoding.max_len_b=4",
        "views=false",
        f"hydra.sweep.dir={root / 'sweep'}",
        "hydra.sweep.subdir=${hydra.runtime.choices.arm}/seed${trainer.seed}",
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    return root / "sweep"


def test_each_outside_encoding_trains_translates_and_evaluates(sweep):
    for arm, path in [("my_binary", "BinaryPositions"), ("my_reversed", "ReversedRotary")]:
        run_dir = sweep / arm / "seed1"
        metrics = json.loads((run_dir / "metrics.json").read_text())
        assert metrics["config"]["pe"]["encoder"] == f"my_encodings.{path}"
        translated = script("translate", f"run={run_dir}", stdin="Ein Hund läuft.\n".encode())
        assert translated.returncode == 0, translated.stderr.decode()
        assert translated.stdout.decode().count("\n") == 1
    run_dir = sweep / "my_penalty" / "seed1"
    for checkpoint in ("best", "averaged"):
        result = script("evaluate", f"run={run_dir}", f"checkpoint={checkpoint}", "beam=1")
        assert result.returncode == 0, result.stderr.decode()
    evaluated = json.loads((run_dir / "metrics.json").read_text())["eval"]
    assert {"test_2016_flickr.beam1.best", "test_2016_flickr.beam1.averaged"} <= set(evaluated)


def test_report_gives_each_outside_arm_an_exploratory_verdict_against_the_reference(sweep):
    result = script("report", f"sweep={sweep}")
    assert result.returncode == 0, result.stderr.decode()
    report = (sweep / "report.md").read_text()
    for arm in ARMS[1:]:
        assert f"| {arm} vs full_sinusoidal | test_2016_flickr | 2 (1 2) |" in report
    assert "an arm no declared question covers" in report


def test_without_the_module_on_pythonpath_a_script_names_it_in_one_line(sweep):
    result = script("translate", f"run={sweep / 'my_binary' / 'seed1'}", plugins=False)
    stderr = result.stderr.decode().strip()
    assert result.returncode != 0 and "Traceback" not in stderr
    assert len(stderr.splitlines()) <= 2, stderr
    assert "cannot import my_encodings" in stderr and "PYTHONPATH" in stderr
