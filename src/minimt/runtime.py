"""Where and how a process computes: device, precision and autocast, seeds, threads."""

from __future__ import annotations

import os
import random

import torch
from hydra.core.hydra_config import HydraConfig

from minimt.errors import MinimtError


class DeviceUnavailable(MinimtError, RuntimeError):
    """A device asked for that this machine does not have."""


def pick_device(name: str) -> torch.device:
    """ "auto" is cuda when available, else cpu; asking for a missing cuda is an error."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailable("device cuda asked for, but no CUDA device is available; use cpu")
    return torch.device(name)


def device_name(device: torch.device) -> str:
    """The device in words for metrics.json: the GPU's name (NVIDIA H100 80GB HBM3), or cpu."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else device.type


def bf16_supported(device: torch.device) -> bool:
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolve_precision(precision: str, device: torch.device) -> str:
    """ "auto" becomes bf16 where the device has fast bf16 matrix units, else fp32."""
    if precision == "auto":
        return "bf16" if bf16_supported(device) else "fp32"
    return precision


def precision_autocast(precision: str, device: torch.device) -> torch.autocast:
    """bf16 autocast on `device` for precision "bf16"; a disabled one (fp32) otherwise."""
    return torch.autocast(device.type, torch.bfloat16, enabled=precision == "bf16")


def seed_everything(seed: int) -> None:
    """Python's and torch's random streams (dropout, initial weights) from one seed."""
    random.seed(seed)
    torch.manual_seed(seed)


def set_num_threads(num_threads: int | None) -> None:
    """torch's intra-op threads; None keeps torch's default (one per core)."""
    if num_threads:
        torch.set_num_threads(num_threads)


def threads_per_job(num_threads: int | None, parallel_jobs: int | None, cores: int) -> int | None:
    """The intra-op threads of one job: `num_threads` when set, else the `cores` split evenly
    between `parallel_jobs` jobs running at once (joblib's count: -1 = one per core, -2 = one
    per core but one, ...), at least 1; None (torch's default) when no launcher runs jobs side
    by side."""
    if num_threads or parallel_jobs is None:
        return num_threads
    jobs = parallel_jobs if parallel_jobs > 0 else max(cores + 1 + parallel_jobs, 1)
    return max(cores // jobs, 1)


def available_cores() -> int:
    """The cores this process may run on."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return cores or 1


def job_num_threads(num_threads: int | None) -> int | None:
    """trainer.num_threads, or this job's share of the cores it may run on when the Hydra
    launcher runs several jobs at once (its n_jobs: hydra/launcher=parallel)."""
    launcher = HydraConfig.get().launcher if HydraConfig.initialized() else {}
    return threads_per_job(num_threads, launcher.get("n_jobs"), available_cores())


def parallel_jobs(
    gpu_gb_per_job: float,
    *,
    cores: int | None = None,
    gpu_free_gb: float | None = None,
) -> int:
    """How many runs of a sweep to start at once on this machine (hydra/launcher=parallel_auto):
    on a CUDA machine as many as the GPU's free memory holds at `gpu_gb_per_job` each, but no
    more than give each run two CPU threads (one collates and launches kernels, one is spare);
    on a CPU one run per core, each on one thread. `cores` and `gpu_free_gb` default to this
    machine's (gpu_free_gb None and no CUDA device: a CPU machine)."""
    cores = available_cores() if cores is None else cores
    if gpu_free_gb is None and torch.cuda.is_available():
        gpu_free_gb = torch.cuda.mem_get_info()[0] / 2**30
    if gpu_free_gb is None:
        return cores
    return max(1, min(int(gpu_free_gb // gpu_gb_per_job), cores // 2))
