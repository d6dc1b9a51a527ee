"""The study's arms and its two resumable sweeps: every arm sets exactly its contrast, every job
has its own fixed directory, and a sweep run again skips finished runs and resumes the others."""

import json
import subprocess
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

from minimt.config import ConfigError, validate_config
from minimt.rundir import finished_run, interrupted_run
from tests.helpers import (
    QUICK_FINISH,
    REPO,
    compose_config,
    run_script,
    sweep_jobs,
    tiny_run_overrides,
)

ENCODINGS = ("sinusoidal", "learned", "rope", "alibi", "none")
BALANCE_ARMS = {"fairseq_learned", "sinusoid_rms_learned", "unscaled_small_sinusoidal"}
CPU_LENGTH_ARMS = {"length_rms_learned"}  # Q8's, run by its plan's command on the CPU protocol
RECIPE_ARMS = {"recipe_static", "recipe_adaptive"}  # run by the plans of configs/recipe_plan
LENGTH_SPLIT_ARMS = {f"length_{pe}" for pe in ENCODINGS} | {f"control_{pe}" for pe in ENCODINGS}
UNSCALED = {"embedding.scale": False}
INIT1 = {"embedding.init_std": 1.0}
SPLIT = {"data.train_max_words": 15, "data.long_tests_over": 15}
CONTROL = {"data.long_tests_over": 15}  # and data.train_subsample: the length split's size

# the learned arms other than Q6's keep the table's init their runs used, GPT's and BERT's
GPT_INIT = {"pe.init_std": 0.02}


def contrast(pe: str, keys: dict) -> tuple[str, dict]:
    return pe, (keys | GPT_INIT if pe == "learned" else keys)


# arm -> (its positional encoding group option, the resolved keys it changes from that config)
ARMS: dict[str, tuple[str, dict]] = {
    **{f"length_{pe}": contrast(pe, SPLIT) for pe in ENCODINGS},
    **{f"control_{pe}": contrast(pe, CONTROL) for pe in ENCODINGS},
    **{f"full_{pe}": contrast(pe, {}) for pe in ENCODINGS},
    **{f"unscaled_{pe}": contrast(pe, UNSCALED) for pe in ("sinusoidal", "learned", "rope")},
    **{f"init1_{pe}": contrast(pe, INIT1) for pe in ("sinusoidal", "learned", "rope")},
    **{
        f"unscaled_init1_{pe}": contrast(pe, UNSCALED | INIT1)
        for pe in ("sinusoidal", "learned", "rope")
    },
    "share_none": ("sinusoidal", {"embedding.share": "none"}),
    "share_decoder": ("sinusoidal", {"embedding.share": "decoder"}),
    "encoder_only": ("sinusoidal", {"pe.decoder": "none"}),
    "decoder_only": ("sinusoidal", {"pe.encoder": "none"}),
    # magnitude balance (experiment=study_cpu's Q6), at the default d_model of 256; the table at
    # the sinusoid's RMS is pe=learned's default
    "fairseq_learned": ("learned", {"pe.init_std": 256**-0.5}),
    "sinusoid_rms_learned": ("learned", {}),
    "unscaled_small_sinusoidal": ("sinusoidal", UNSCALED | {"pe.scale": 256**-0.5}),
    # Q8: the length split with the table at the sinusoid's RMS (pe=learned's default)
    "length_rms_learned": ("learned", SPLIT),
    # the recipe's decision (configs/recipe_plan): today's recipe and the one following the budget
    "recipe_static": ("sinusoidal", {}),
    "recipe_adaptive": ("sinusoidal", {"trainer.adapt": True}),
}


def flat(cfg: DictConfig) -> dict:
    """The resolved config as {dotted.key: value}."""

    def walk(node, prefix):
        if isinstance(node, dict):
            for key, value in node.items():
                yield from walk(value, f"{prefix}{key}.")
        else:
            yield prefix[:-1], node

    return dict(walk(OmegaConf.to_container(cfg, resolve=True), ""))


def changed(cfg: DictConfig, reference: DictConfig) -> dict:
    new, old = flat(cfg), flat(reference)
    assert new.keys() == old.keys()
    return {key: value for key, value in new.items() if value != old[key]}


def compose_with_hydra(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=True)


def test_the_arm_group_holds_exactly_the_study_s_and_the_recipe_decision_s_configurations():
    files = {path.stem for path in (REPO / "configs" / "arm").glob("*.yaml")}
    assert files == ARMS.keys()
    assert len(files) == 5 + 5 + 5 + 9 + 2 + 2 + 3 + 1 + 2


@pytest.mark.parametrize("arm", sorted(ARMS))
def test_each_arm_sets_its_encoding_and_changes_only_its_contrast(arm):
    pe, expected = ARMS[arm]
    cfg = compose_config(f"arm={arm}")
    assert compose_with_hydra(f"arm={arm}").hydra.runtime.choices.pe == pe
    got = changed(cfg, compose_config(f"pe={pe}"))
    if arm.startswith("control_"):
        assert got.pop("data.train_subsample") == "length_split"
    assert got == expected


@pytest.mark.parametrize("budget", ["study", "study_cpu", "smoke"])
def test_every_arm_passes_the_config_rules_on_each_budget(budget):
    for arm in ARMS:
        validate_config(compose_config(f"experiment={budget}", f"arm={arm}"))


def test_both_controls_train_on_as_many_pairs_as_the_length_split():
    sizes = {
        compose_config(f"arm=control_{pe}").data.train_subsample for pe in ("sinusoidal", "learned")
    }
    assert sizes == {"length_split"}


def test_the_baseline_arm_is_the_default_config():
    assert changed(compose_config("arm=full_sinusoidal"), compose_config()) == {}


def arms_and_seeds(jobs: list[list[str]]) -> list[tuple[str, int]]:
    def value(job, key):
        return next(o.split("=", 1)[1] for o in job if o.startswith(f"{key}="))

    return [(value(job, "arm"), int(value(job, "trainer.seed"))) for job in jobs]


def test_the_length_split_sweep_runs_five_encodings_and_two_controls_with_three_seeds():
    runs = arms_and_seeds(sweep_jobs("sweep=length_split"))
    assert sorted(runs) == sorted((arm, seed) for arm in LENGTH_SPLIT_ARMS for seed in (1, 2, 3))


def test_the_study_sweep_runs_every_other_arm_with_three_seeds():
    runs = arms_and_seeds(sweep_jobs("sweep=study"))
    other_arms = ARMS.keys() - LENGTH_SPLIT_ARMS - BALANCE_ARMS - CPU_LENGTH_ARMS - RECIPE_ARMS
    assert sorted(runs) == sorted((arm, seed) for arm in other_arms for seed in (1, 2, 3))


def test_seeds_and_arms_given_on_the_command_line_replace_the_sweep_s_own():
    runs = arms_and_seeds(
        sweep_jobs("sweep=length_split", "trainer.seed=range(1,6)", "arm=length_alibi,length_rope")
    )
    assert sorted(runs) == [(a, s) for a in ("length_alibi", "length_rope") for s in range(1, 6)]


@pytest.mark.parametrize("sweep", ["study", "length_split"])
def test_every_job_has_its_own_directory_in_one_fixed_sweep_directory(sweep):
    jobs = sweep_jobs(f"sweep={sweep}")
    dirs = []
    for job in jobs:
        hydra = compose_with_hydra(*job).hydra
        dirs.append((hydra.sweep.dir, hydra.sweep.subdir))
    assert {d for d, _ in dirs} == {f"multirun/{sweep}/study"}  # no date: a re-run finds it
    assert [s for _, s in dirs] == [f"{arm}/seed{seed}" for arm, seed in arms_and_seeds(jobs)]
    assert len(set(dirs)) == len(jobs)


@pytest.mark.parametrize("sweep", ["study", "length_split"])
def test_a_sweep_trains_on_the_study_budget_unless_another_experiment_is_given(sweep):
    study = compose_with_hydra(f"sweep={sweep}", "arm=full_rope")
    assert study.hydra.runtime.choices.experiment == "study"
    assert study.trainer.patience is not None and study.model.d_model == 256
    assert study.pe.encoder == "rope"
    smoke = compose_with_hydra(f"sweep={sweep}", "arm=full_rope", "experiment=smoke")
    assert smoke.model.d_model == compose_config("experiment=smoke").model.d_model
    assert smoke.hydra.sweep.dir == f"multirun/{sweep}/smoke"  # never mixed with the study's runs
    dir_given = compose_with_hydra(f"sweep={sweep}", "hydra.sweep.dir=elsewhere")
    assert dir_given.hydra.sweep.dir == "elsewhere"


def write_metrics(run_dir: Path, cfg: DictConfig, best_val_bleu: float = 12.5) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    config = OmegaConf.to_container(cfg, resolve=True)
    metrics = {"best_val_bleu": best_val_bleu, "config": config}
    (run_dir / "metrics.json").write_text(json.dumps(metrics))


def write_step_checkpoint(run_dir: Path, step: int) -> None:
    (run_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    (run_dir / "checkpoints" / f"step_{step}.pt").write_bytes(b"not read by these tests")


def test_a_run_directory_with_metrics_json_holds_a_finished_run(tmp_path):
    cfg = compose_config("arm=length_rope")
    assert finished_run(tmp_path, cfg) is None
    write_step_checkpoint(tmp_path, 100)
    write_metrics(tmp_path, cfg)
    assert finished_run(tmp_path, cfg)["best_val_bleu"] == 12.5
    assert not interrupted_run(tmp_path)


def test_a_finished_run_with_other_settings_is_an_error_that_names_them(tmp_path):
    write_metrics(tmp_path, compose_config("arm=length_rope"))
    with pytest.raises(ConfigError, match=r"pe\.encoder: checkpoint 'rope', config 'learned'"):
        finished_run(tmp_path, compose_config("arm=length_learned"))


def test_step_checkpoints_without_metrics_json_are_an_interrupted_run(tmp_path):
    assert not interrupted_run(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "best.pt").write_bytes(b"")  # weights only: cannot resume
    assert not interrupted_run(tmp_path)
    write_step_checkpoint(tmp_path, 100)
    assert interrupted_run(tmp_path)


def train_script(*args: str) -> subprocess.CompletedProcess:
    """scripts/train.py in a fresh process; its log (Hydra's console handler) in .stdout."""
    return run_script("train.py", *args, stdin="")


def snapshot(folder: Path) -> dict:
    """Every file under `folder` but Hydra's own records (.hydra/, the log): its bytes and mtime."""
    return {
        path: (path.read_bytes(), path.stat().st_mtime_ns)
        for path in folder.rglob("*")
        if path.is_file() and ".hydra" not in path.parts and path.suffix != ".log"
    }


def test_train_py_skips_a_finished_run_without_training_or_touching_it(tmp_path):
    # data.url leads nowhere: a run that started training would fail preparing its data
    overrides = [f"data.url={tmp_path / 'no_data'}", f"data.dir={tmp_path / 'data'}"]
    run_dir = tmp_path / "run"
    write_metrics(run_dir, compose_config(*overrides))
    write_step_checkpoint(run_dir, 100)
    before = snapshot(run_dir)
    done = train_script(*overrides, f"hydra.run.dir={run_dir}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"skipped: {run_dir} already finished" in done.stdout
    assert snapshot(run_dir) == before
    assert not (tmp_path / "data").exists()


@pytest.mark.slow
def test_a_smoke_length_split_sweep_run_again_skips_finished_runs_and_resumes_the_rest(
    multi30k_dir, tmp_path
):
    sweep_dir = tmp_path / "sweep"
    command = [
        "-m",
        "sweep=length_split",
        *tiny_run_overrides(multi30k_dir, tmp_path / "data", "trainer.max_steps=20"),
        *QUICK_FINISH,  # what is checked here is skipping and resuming
        "decoding.test_beam=1",
        "decoding.max_len_a=0",  # test outputs of at most 4 tokens: an untrained model never stops
        "decoding.max_len_b=4",
        "arm=length_alibi,length_learned",  # the controls' M is larger than smoke's data
        "trainer.seed=1",
        f"hydra.sweep.dir={sweep_dir}",
    ]
    first = train_script(*command)
    assert first.returncode == 0, first.stderr[-3000:]
    runs = [sweep_dir / "length_alibi" / "seed1", sweep_dir / "length_learned" / "seed1"]
    metrics = [json.loads((run / "metrics.json").read_text()) for run in runs]
    assert [m["steps"] for m in metrics] == [20, 20]
    assert [m["config"]["pe"]["encoder"] for m in metrics] == ["alibi", "learned"]
    assert all(m["config"]["data"]["train_max_words"] == 15 for m in metrics)
    assert all(any(name.startswith("long_") for name in m["test"]) for m in metrics)
    finished = snapshot(runs[0])
    (runs[1] / "metrics.json").unlink()  # as if stopped after its last checkpoint

    again = train_script(*command)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"skipped: {runs[0]} already finished" in again.stdout
    assert snapshot(runs[0]) == finished
    assert f"resumed from {runs[1] / 'checkpoints' / 'step_20.pt'}" in again.stdout
    resumed = json.loads((runs[1] / "metrics.json").read_text())
    assert resumed["steps"] == 20 and resumed["config"]["resume"] == str(runs[1])
