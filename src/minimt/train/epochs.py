"""Which batches each process takes at each step: epochs, accumulation, the resume position."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import closing

from omegaconf import DictConfig

from minimt.data.batching import Batch, prefetched
from minimt.data.tokenized import BatchedPairs
from minimt.train.distributed import Distributed
from minimt.train.state import TrainState


def epoch_steps(
    batches: list[list[int]], consumed: int, rank: int, world_size: int, accumulate: int
) -> list[list[list[int]]]:
    """This rank's micro-batches for each optimizer step left in an epoch.

    A step takes world_size x accumulate consecutive batches after the `consumed` ones; rank r
    takes the r-th `accumulate` of them. The remainder (fewer than one step's worth) is dropped,
    so every rank takes the same number of steps.
    """
    group = world_size * accumulate
    usable = len(batches) - len(batches) % group
    starts = range(consumed, usable - group + 1, group)
    return [batches[s + rank * accumulate : s + (rank + 1) * accumulate] for s in starts]


def step_batches(
    train_batches: BatchedPairs, state: TrainState, dist: Distributed, trainer: DictConfig
) -> Iterator[list[Batch]]:
    """This rank's collated batches for each step, from state's position to trainer.max_epochs.

    Moves `state` to the next epoch when one runs out; collation runs trainer.prefetch batches
    ahead on a background thread, stopped when the generator is closed.
    """
    while state.epoch < trainer.max_epochs:
        steps = epoch_steps(
            train_batches.batches(state.epoch),
            state.epoch_batches,
            dist.rank,
            dist.world_size,
            trainer.accumulate,
        )
        collated = ([train_batches.collate(i) for i in step] for step in steps)
        with closing(prefetched(collated, trainer.prefetch)) as epoch:
            yield from epoch
        state.epoch += 1
        state.epoch_batches = 0
