"""The benchmarks' one timer: median milliseconds of a call, after warm-up.

CUDA events around each call on a GPU (the work the call queued, not the Python around
it); wall clock on the CPU (smoke runs only). ``host_ms`` is the Python side alone: the time
a call takes to queue its GPU work. Each timed call starts on an idle GPU, so a call whose
host time exceeds its GPU time is timed at about its host time.
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch


def median_ms(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 3) -> float:
    """Median milliseconds of ``fn()`` over ``reps`` calls, after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(times)


def host_ms(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 3) -> float:
    """Median milliseconds the host spends inside ``fn()`` (queuing work, not waiting for it)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        fn()
        times.append(1e3 * (time.perf_counter() - t0))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(times)
