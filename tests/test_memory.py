"""The run's memory sampler: peak, phase and time of the peak."""

import time

import numpy as np

from minimt.train.memory import PeakMemory, rss_mb


def test_the_peak_is_kept_with_its_phase_and_time():
    with PeakMemory(interval=0.01) as memory:
        memory.phase = "small"
        time.sleep(0.05)
        before = rss_mb()
        memory.phase = "big"
        block = np.ones(200 * 2**20 // 8)  # 200 MB touched
        time.sleep(0.05)
        del block
        memory.phase = "after"
        time.sleep(0.05)
    found = memory.summary()
    assert found["peak_phase"] == "big"
    assert found["peak_rss_mb"] >= before + 190
    assert 0.05 <= found["peak_at_seconds"] < 10
    by_phase = found["peak_rss_mb_by_phase"]
    assert list(by_phase) == ["setup", "small", "big", "after"]
    assert by_phase["big"] == found["peak_rss_mb"] >= by_phase["small"] + 190
