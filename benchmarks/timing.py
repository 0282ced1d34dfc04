"""The benchmarks' timers: median milliseconds of a call, after warm-up.

CUDA events around each call on a GPU (the work the call queued, not the Python around
it); wall clock on the CPU (smoke runs only). ``host_ms`` is the Python side alone: the time
a call takes to queue its GPU work. Each timed call starts on an idle GPU, so a call whose
host time exceeds its GPU time is timed at about its host time, and every call includes the
device's wait for its first kernel. ``stream_ms`` times calls queued back to back instead (a
stream of renders, as in training): there the host queues a call while the device runs the
one before, and the per-call time is the larger of the two.

What a call returns is released after the clock stops: freeing the outputs (and the autograd
graph behind them) is not part of the call. A training step frees them later, while the GPU
works on the rest of the step. Until 2026-11-30 (fifth) they were freed inside the timed span.
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
            out = fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
            del out
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            out = fn()
            times.append(1e3 * (time.perf_counter() - t0))
            del out
    return statistics.median(times)


def stream_ms(fn: Callable[[], object], device: torch.device, calls: int, rounds: int = 3,
              warmup: int = 3) -> float:
    """Median over ``rounds`` of the milliseconds per call of ``calls`` calls of ``fn()`` queued back
    to back: one pair of CUDA events around them all, no synchronisation between calls, each call's
    outputs released when the next returns (as a training loop releases a step's). This is the
    throughput of a stream of calls, where the host queues call k + 1 while the device runs call k;
    ``median_ms`` times each call from an idle device. Wall clock on the CPU."""
    for _ in range(warmup):
        fn()
    cuda = device.type == "cuda"
    per_call = []
    for _ in range(rounds):
        if cuda:
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        t0 = time.perf_counter()
        out = None
        for _ in range(calls):
            out = fn()  # the call before's outputs are released here
        if cuda:
            end.record()
            end.synchronize()
            per_call.append(start.elapsed_time(end) / calls)
        else:
            per_call.append(1e3 * (time.perf_counter() - t0) / calls)
        del out
    return statistics.median(per_call)


def host_ms(fn: Callable[[], object], device: torch.device, reps: int, warmup: int = 3) -> float:
    """Median milliseconds the host spends inside ``fn()`` (queuing work, not waiting for it)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        times.append(1e3 * (time.perf_counter() - t0))
        del out
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return statistics.median(times)
