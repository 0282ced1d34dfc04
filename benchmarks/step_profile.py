"""Is a training step host- or device-bound, and where does each side's time go?

Runs ``benchmarks/build_drive30.py`` (a fresh drive30 capture, the fast preset) with the
trainer's step wrapped: the host's time in each step call (no synchronisation), a torch
profile of a window of steady steps (GPU time per step, by kernel), and optionally cProfile
over a later window (the host's time, by function).

    PYTHONPATH=. python benchmarks/step_profile.py                      # cuda:0, 1800 steps
    PYTHONPATH=. python benchmarks/step_profile.py --cprofile 1600 1800  # and the host by function
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time

import torch

import benchmarks.build_drive30 as build_drive30
from nurec_usd.train import trainer as trainer_module


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--steps", type=int, default=1800)
    p.add_argument("--window", type=int, nargs=2, default=(1500, 1530), help="steps [a, b) under the torch profiler")
    p.add_argument("--cprofile", type=int, nargs=2, default=None, help="steps [a, b) under cProfile")
    p.add_argument("--rows", type=int, default=20, help="kernels / functions listed")
    args = p.parse_args()
    if not (200 < args.window[0] < args.window[1] <= args.steps):
        raise SystemExit("--window must lie within (200, --steps]")

    real_step = trainer_module.Trainer.step
    host: list[tuple[int, float]] = []
    state: dict = {}

    def step(self, i: int):
        if i == args.window[0]:
            torch.cuda.synchronize()
            state["prof"] = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA])
            state["prof"].__enter__()
        if args.cprofile and i == args.cprofile[0]:
            torch.cuda.synchronize()
            state["cprof"] = cProfile.Profile()
            state["cprof"].enable()
        t0 = time.perf_counter()
        out = real_step(self, i)
        host.append((i, time.perf_counter() - t0))
        if i == args.window[1] - 1:
            torch.cuda.synchronize()
            state["prof"].__exit__(None, None, None)
            n = args.window[1] - args.window[0]
            rows = sorted(((e.self_device_time_total / n / 1e3, e.count / n, e.key[:90])
                           for e in state["prof"].key_averages() if e.self_device_time_total > 0), reverse=True)
            print(f"GPU time per step (steps {args.window[0]}-{args.window[1] - 1}): "
                  f"{sum(r[0] for r in rows):.2f} ms", flush=True)
            for ms, count, name in rows[:args.rows]:
                print(f"  {ms:7.3f} ms  x{count:5.1f}  {name}", flush=True)
        if args.cprofile and i == args.cprofile[1] - 1:
            state["cprof"].disable()
            text = io.StringIO()
            pstats.Stats(state["cprof"], stream=text).sort_stats("cumulative").print_stats(args.rows)
            print(f"host by function (cProfile, steps {args.cprofile[0]}-{args.cprofile[1] - 1}):\n{text.getvalue()}",
                  flush=True)
        return out

    trainer_module.Trainer.step = step
    sys.argv = ["build_drive30.py", "--device", args.device, "--steps", str(args.steps)]
    try:
        build_drive30.main()
    finally:
        trainer_module.Trainer.step = real_step
        steady = [h for i, h in host if 200 <= i < args.window[0]]
        if steady:
            print(f"host time per step call (steps 200-{args.window[0] - 1}, no synchronisation): median "
                  f"{1e3 * statistics.median(steady):.2f} ms")


if __name__ == "__main__":
    main()
