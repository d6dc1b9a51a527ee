"""Threads for runs that share a machine: the cores split between the launcher's parallel jobs."""

import pytest
import torch

from minimt.runtime import device_name, threads_per_job


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
