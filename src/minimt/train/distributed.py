"""Data-parallel training with torchrun: process group, rank-0 duties, collectives."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def launched_as_main() -> bool:
    """Whether this process is rank 0 of its torchrun job, or runs alone (before any process
    group exists)."""
    return os.environ.get("RANK", "0") == "0"


@dataclass(frozen=True)
class Distributed:
    """This process's place among `world_size` training processes (1 when not under torchrun)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls, device: torch.device) -> Distributed:
        """Join the process group that torchrun describes (gloo on CPU, nccl on GPU)."""
        world_size = int(os.environ.get("WORLD_SIZE", "1"))
        if world_size == 1:
            return cls()
        if device.type == "cuda":
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        return cls(dist.get_rank(), world_size, int(os.environ["LOCAL_RANK"]))

    @property
    def is_main(self) -> bool:
        """Rank 0 alone validates, logs and writes files."""
        return self.rank == 0

    def device(self, device: torch.device) -> torch.device:
        """This rank's own GPU when training on cuda."""
        return torch.device("cuda", self.local_rank) if device.type == "cuda" else device

    def wrap(self, module: nn.Module) -> nn.Module:
        """DistributedDataParallel around `module` when there are several processes."""
        if self.world_size == 1:
            return module
        device_ids = [self.local_rank] if next(module.parameters()).is_cuda else None
        return DistributedDataParallel(module, device_ids=device_ids)

    def sum(self, values: list[float], device: torch.device) -> list[float]:
        """Element-wise sum of `values` over all processes (one all-reduce)."""
        if self.world_size == 1:
            return values
        total = torch.tensor(values, dtype=torch.float64, device=device)
        dist.all_reduce(total)
        return total.tolist()

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order."""
        if self.world_size == 1:
            return [obj]
        gathered: list[Any] = [None] * self.world_size
        dist.all_gather_object(gathered, obj)
        return gathered

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every process."""
        if self.world_size == 1:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    @contextmanager
    def main_first(self) -> Iterator[None]:
        """Rank 0 runs the block first (downloads, tokenizer training, caches); the rest follow."""
        if not self.is_main:
            dist.barrier()
        yield
        if self.is_main and self.world_size > 1:
            dist.barrier()

    def close(self) -> None:
        if self.world_size > 1:
            dist.destroy_process_group()
