"""Counting host reads: the calls that make the host wait for a tensor's value (on a GPU, for
every kernel queued before it), so that tests can bound them without a GPU.

    with HostReads() as reads:
        greedy_decode(model, src, ...)
    assert reads.count <= steps, reads.calls

Counted, whatever the tensor's device (on a CPU the same calls are free, but they are the calls
that would wait on a GPU): `item`, `tolist`, `numpy`, `cpu`, `to` from another device to the
CPU, `bool()` / `int()` / `float()` / `operator.index()` of a tensor (an `if tensor:` included),
`nonzero`, `argwhere`, `masked_select`, one-argument `torch.where`, and indexing or assigning
with a boolean tensor (`x[mask]`, `x[mask] = y`: their sizes are read back first).

A TorchFunctionMode sees the calls made from Python on this thread, library code included (an
optimizer's `.item()`); reads made inside one op, in C++, are not seen.
"""

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

# Calls that always return a value the host reads.
READS = {
    "item",
    "tolist",
    "numpy",
    "cpu",
    "__bool__",
    "__int__",
    "__float__",
    "__index__",
    "nonzero",
    "argwhere",
    "masked_select",
}
INDEXING = {"__getitem__", "__setitem__"}


def has_bool_tensor(index: object) -> bool:
    """Whether an index (a tensor, or a tuple or list of indices) holds a boolean tensor."""
    if isinstance(index, Tensor):
        return index.dtype == torch.bool
    if isinstance(index, tuple | list):
        return any(has_bool_tensor(part) for part in index)
    return False


def is_host_read(name: str, args: tuple, kwargs: dict) -> bool:
    """Whether the call `name`(*args, **kwargs) reads a tensor's value back to the host."""
    if name in READS:
        return True
    if name in INDEXING:
        return has_bool_tensor(args[1])
    if name == "where":
        return len(args) + len(kwargs) == 1
    if name == "to":
        source = args[0]
        target = kwargs.get(
            "device", next((a for a in args[1:] if not isinstance(a, Tensor)), None)
        )
        moved = isinstance(target, str | torch.device) and torch.device(target).type == "cpu"
        return moved and isinstance(source, Tensor) and source.device.type != "cpu"
    return False


class HostReads(TorchFunctionMode):
    """While entered, counts the host reads (see the module docstring) made on this thread:
    `count` in all, `calls` by function name."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: Counter[str] = Counter()

    @property
    def count(self) -> int:
        return sum(self.calls.values())

    def __torch_function__(
        self, func: Callable, types: tuple, args: tuple = (), kwargs: dict | None = None
    ) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if is_host_read(name, args, kwargs):
            self.calls[name] += 1
        return func(*args, **kwargs)
