"""Threads for runs that share a machine: the cores split between the launcher's parallel jobs."""

import pytest
import torch
from hydra import compose, initialize_config_dir

from minimt.config import register_resolvers
from minimt.errors import MinimtError
from minimt.runtime import device_name, parallel_jobs, pick_device, threads_per_job
from tests.helpers import REPO


@pytest.mark.parametrize(
    ("cores", "jobs", "threads"),
    [
        (2, 1, 2),
        (2, 2, 1),
        (16, 8, 2),
        (16, 3, 5),  # the remainder stays idle rather than oversubscribed
        (2, 4, 1),  # more jobs than cores: still one thread each
        (16, -1, 1),  # joblib's -1: one job per core
        (16, -2, 1),  # one per core but one: 15 jobs
        (16, -9, 2),  # 8 jobs
    ],
)
def test_the_cores_are_split_between_the_jobs_running_at_once(cores, jobs, threads):
    assert threads_per_job(None, jobs, cores) == threads


def test_an_explicit_thread_count_wins():
    assert threads_per_job(3, 2, 16) == 3
    assert threads_per_job(3, None, 16) == 3


def test_without_parallel_jobs_torch_keeps_its_default():
    assert threads_per_job(None, None, 16) is None


def test_the_device_is_named_cpu_on_the_cpu():
    assert device_name(torch.device("cpu")) == "cpu"


def test_cuda_asked_for_without_a_cuda_device_is_a_user_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(MinimtError, match="no CUDA device is available; use cpu"):
        pick_device("cuda")
    assert pick_device("auto") == torch.device("cpu")


def test_parallel_jobs_fit_the_gpu_memory_and_give_each_run_two_cores():
    assert parallel_jobs(8, cores=16, gpu_free_gb=139) == 8  # two cores each bind first
    assert parallel_jobs(8, cores=16, gpu_free_gb=30) == 3  # then the GPU's memory
    assert parallel_jobs(8, cores=16, gpu_free_gb=5) == 1  # at least one run
    if not torch.cuda.is_available():
        assert parallel_jobs(8, cores=2) == 2  # a CPU: one run per core


def test_the_auto_launcher_resolves_to_this_machines_jobs():
    register_resolvers()
    with initialize_config_dir(config_dir=str(REPO / "configs"), version_base="1.3"):
        cfg = compose(
            "config", overrides=["hydra/launcher=parallel_auto"], return_hydra_config=True
        )
    assert cfg.hydra.launcher.n_jobs == parallel_jobs(8)
