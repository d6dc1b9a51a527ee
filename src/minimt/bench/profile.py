"""Where the time goes: torch.profiler's ops ranked by their own (self) time."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from minimt.bench.measure import synchronize


def top_ops(fn: Callable[[], object], device: torch.device, rows: int) -> list[dict]:
    """The `rows` ops with the most self time while `fn` runs: name, share of all ops' self
    time, milliseconds and calls. Self time is on the GPU for a CUDA device (kernels), on the
    host otherwise; ops run by intra-op threads count once, under the op that launched them."""
    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as profiler:
        fn()
        synchronize(device)
    key = "self_device_time_total" if cuda else "self_cpu_time_total"
    events = [event for event in profiler.key_averages() if getattr(event, key) > 0]
    total = sum(getattr(event, key) for event in events)
    ranked = sorted(events, key=lambda event: getattr(event, key), reverse=True)[:rows]
    return [
        {
            "op": event.key,
            "self_share": getattr(event, key) / total,
            "self_ms": getattr(event, key) / 1e3,
            "calls": event.count,
        }
        for event in ranked
    ]
