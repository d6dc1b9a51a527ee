"""The sweep configs expand into the jobs the study needs, each named by its overrides."""

from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from tests.helpers import REPO, sweep_jobs


def test_the_embedding_sweep_crosses_encodings_scaling_sharing_and_three_seeds():
    jobs = sweep_jobs("sweep=embedding")
    assert len(jobs) == 4 * 2 * 2 * 3
    assert len({tuple(job) for job in jobs}) == len(jobs)
    assert {j for job in jobs for j in job if j.startswith("pe=")} == {
        "pe=sinusoidal",
        "pe=learned",
        "pe=none",
        "pe=rope",
    }


def test_command_line_lists_replace_the_sweep_s_own():
    jobs = sweep_jobs(
        "sweep=embedding",
        "pe=sinusoidal,learned",
        "embedding.scale=true,false",
        "embedding.share=all",
        "trainer.seed=1,2",
    )
    assert len(jobs) == 8


def test_run_directories_are_named_by_the_overrides_that_matter():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["sweep=embedding"], return_hydra_config=True)
    excluded = set(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert {"data.url", "data.dir", "sweep"} <= excluded
    sweep_dirs = OmegaConf.to_container(cfg.hydra.sweep, resolve=False)
    assert sweep_dirs["subdir"] == "${hydra.job.override_dirname}"


def test_the_lr_search_uses_optuna_on_lr_warmup_and_dropout():
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose("config", overrides=["sweep=lr_search"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert "optuna" in sweeper._target_.lower() and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"trainer.lr", "trainer.warmup_steps", "model.dropout"}
