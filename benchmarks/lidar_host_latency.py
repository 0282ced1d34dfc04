"""How long the host takes to queue a lidar forward + backward's first kernel, from an idle GPU.

    python benchmarks/lidar_host_latency.py [--device cuda:0] [--size 5000000] [--reps 30]
    taskset -c 3 python benchmarks/lidar_host_latency.py      # the process confined to one core

``raster_lidar.py`` times each call from an idle GPU: the call's time then includes the
device's wait for its first kernel, which the host queues only after its Python up to the
projection's launch. This measures that wait on the benchmark's street (fixed capacity, the
leaves' gradients set to None before each call) after four ways of waiting for the call
before:

* sync: ``Event.synchronize`` (what ``benchmarks.timing.median_ms`` does);
* poll: a Python loop on ``Event.query()`` (the host thread never sleeps);
* sleep: synchronise, then sleep 2 ms;
* busy: synchronise, then 2 ms of a Python busy loop.

It prints, per way, the median (and least) time of the call (CUDA events on a GPU, wall clock
on the CPU) and of the host's time from the call's start to the return of its first launch.
PyTorch runs the backward on a worker thread of its own; confining the process to one core
(``taskset``) puts both threads on one core's caches.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import nurec_usd.ops.lidar as lidar_render  # noqa: E402
from benchmarks.raster_lidar import street_call  # noqa: E402

WAYS = ("sync", "poll", "sleep", "busy")


def wait_for(way: str, event: torch.cuda.Event | None) -> None:
    """Wait for ``event`` (the previous call's end; None on the CPU) the way named."""
    if event is not None:
        if way == "poll":
            while not event.query():
                pass
        else:
            event.synchronize()
    if way == "sleep":
        time.sleep(0.002)
    elif way == "busy":
        until = time.perf_counter() + 0.002
        while time.perf_counter() < until:
            pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--size", type=int, default=5_000_000, help="Gaussians")
    ap.add_argument("--channels", type=int, default=128)
    ap.add_argument("--columns", type=int, default=2048)
    ap.add_argument("--reps", type=int, default=30, help="calls per way and round")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    forward_backward = street_call(device, args.size, args.channels, args.columns).forward_backward
    launched: list[float] = []  # host clock when the call's first launch returned
    queue_launch = lidar_render.launch

    def first_launch_stamped(*a, **k):
        queue_launch(*a, **k)
        if not launched:
            launched.append(time.perf_counter())

    lidar_render.launch = first_launch_stamped  # render_lidar's launches go through this module's name
    for _ in range(5):
        forward_backward()
    if cuda:
        torch.cuda.synchronize(device)
    print(f"{args.size:,} Gaussians, {args.channels} x {args.columns} rays, {len(os.sched_getaffinity(0))} "
          f"CPU core(s) allowed, {torch.cuda.get_device_name(device) if cuda else 'CPU'}")
    print("| round | wait before the call | call (median / least) | host to the first launch (median / least) |")
    print("|---|---|---|---|")
    for r in range(args.rounds):
        for way in WAYS:
            calls, hosts = [], []
            previous = None
            if cuda:
                previous = torch.cuda.Event()
                previous.record()
            for _ in range(args.reps):
                wait_for(way, previous)
                launched.clear()
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                t0 = time.perf_counter()
                out = forward_backward()
                if cuda:
                    end.record()
                    wait_for("poll" if way == "poll" else "sync", end)
                    calls.append(start.elapsed_time(end))
                    previous = end
                else:
                    calls.append(1e3 * (time.perf_counter() - t0))
                hosts.append(1e6 * (launched[0] - t0))
                del out
            print(f"| {r} | {way} | {statistics.median(calls):.3f} / {min(calls):.3f} ms | "
                  f"{statistics.median(hosts):.0f} / {min(hosts):.0f} us |", flush=True)
    lidar_render.launch = queue_launch


if __name__ == "__main__":
    main()
