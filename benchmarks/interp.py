"""Benchmark ``interp``: the fused time interpolation against the same computation in plain torch.

PERF.md configuration: 1M static Gaussians + 200 actors x 5k Gaussians, 300 keys per track,
float32, on one GPU. Times are CUDA-event medians after warm-up:

  * eager: one call as the training loop makes it (includes host launch overhead whenever the
    host is slower than the device);
  * graph: the same call captured in a CUDA graph and replayed (device time only);
  * host: wall time of the Python call alone, without waiting for the device.

Eager and host times are the best of ``--rounds`` rounds' medians (all rounds are printed): the
host's speed varies with other work on the machine, which slows whole rounds.

Before timing it checks our results against the torch twin on the device and that a forward +
backward makes no torch-side host synchronisation. Targets: >= 50x faster than torch, <= 100 us.

    PYTHONPATH=. python benchmarks/interp.py                      # cuda:0, PERF.md configuration
    PYTHONPATH=. python benchmarks/interp.py --device cpu --small  # smoke test
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import torch

from benchmarks.timing import median_ms
from nurec_usd.ops.interpolate import PoseCorrections, TrackKeys, interpolate_gaussians
from nurec_usd.ops.reference import interpolate_gaussians_reference

TARGET_SPEEDUP = 50.0
TARGET_US = 100.0


def build_scene(
    device: torch.device, n_static: int, n_actors: int, per_actor: int, n_keys: int, seed: int = 0
) -> dict:
    """Random but valid inputs: smooth driving tracks over a 30 s capture, Gaussians sorted by actor."""
    g = torch.Generator().manual_seed(seed)
    duration = 30.0
    tracks = []
    for a in range(n_actors):
        # Most actors span the capture; every fifth leaves at 10 s (invisible at the query time).
        start = float(torch.rand(1, generator=g)) * 2.0
        end = 10.0 if a % 5 == 4 else duration - float(torch.rand(1, generator=g)) * 2.0
        step = (end - start) / (n_keys - 1)
        jitter = 0.3 * (torch.rand(n_keys, generator=g, dtype=torch.float64) - 0.5)  # keeps times increasing
        times = start + step * (torch.arange(n_keys, dtype=torch.float64) + jitter)
        yaw = torch.cumsum(0.02 * torch.randn(n_keys, generator=g, dtype=torch.float64), 0)
        speed = 5.0 + 10.0 * float(torch.rand(1, generator=g))
        heading = torch.stack((torch.cos(yaw), torch.sin(yaw), torch.zeros_like(yaw)), -1)
        trans = torch.cumsum(heading * speed * step, 0) + torch.randn(3, generator=g, dtype=torch.float64) * 50
        half = yaw / 2  # rotation about z, with a little pitch/roll noise
        quats = torch.stack((torch.cos(half), torch.zeros_like(half), torch.zeros_like(half), torch.sin(half)), -1)
        quats = quats + 0.01 * torch.randn(n_keys, 4, generator=g, dtype=torch.float64)
        tracks.append((times, trans, quats))
    keys = TrackKeys.from_tracks(tracks, dtype=torch.float32).to(device)
    n_actor_g = n_actors * per_actor
    f32 = dict(dtype=torch.float32)
    scene = dict(
        static_means=(torch.randn(n_static, 3, generator=g, **f32) * 50).to(device),
        static_quats=torch.randn(n_static, 4, generator=g, **f32).to(device),
        actor_means=(torch.randn(n_actor_g, 3, generator=g, **f32) * torch.tensor([2.0, 1.0, 0.8])).to(device),
        actor_quats=torch.randn(n_actor_g, 4, generator=g, **f32).to(device),
        actor_index=torch.arange(n_actors, dtype=torch.int32).repeat_interleave(per_actor).to(device),
        tracks=keys,
    )
    K = keys.num_keys
    scene["corrections"] = PoseCorrections(
        (0.05 * torch.randn(K, 3, generator=g, **f32)).to(device),
        (0.01 * torch.randn(K, 3, generator=g, **f32)).to(device),
    )
    return scene


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_eager(fn: Callable[[], object], device: torch.device, reps: int, warmup: int, rounds: int = 1) -> list[float]:
    """Median microseconds of one call, from CUDA events (perf_counter on CPU), per round."""
    return [1e3 * median_ms(fn, device, reps, warmup) for _ in range(rounds)]


def time_host(fn: Callable[[], object], device: torch.device, reps: int, rounds: int = 1) -> list[float]:
    """Median microseconds the host spends in one call (the device is not waited for), per round."""
    medians = []
    for _ in range(rounds):
        samples = []
        for _ in range(reps):
            _sync(device)
            t0 = time.perf_counter()
            out = fn()
            samples.append((time.perf_counter() - t0) * 1e6)
            del out  # released outside the timed span, as in benchmarks.timing
        medians.append(statistics.median(samples))
    _sync(device)
    return medians


def time_graph(fn: Callable[[], object], device: torch.device, reps: int) -> float | str:
    """Median microseconds of one replay of ``fn`` captured in a CUDA graph ("n/a" on failure)."""
    if device.type != "cuda":
        return "n/a"
    try:
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm up on a side stream, as torch asks before capture
            for _ in range(3):
                fn()
        torch.cuda.current_stream(device).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fn()
        for _ in range(5):
            graph.replay()
        _sync(device)
        samples = []
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            samples.append(start.elapsed_time(end) * 1e3)
        return statistics.median(samples)
    except Exception as err:  # report, keep the eager figures
        print(f"  (graph capture failed: {type(err).__name__}: {err})")
        return "n/a"


def make_calls(scene: dict, t: torch.Tensor, with_corrections: bool, backward: bool, impl: Callable) -> Callable:
    """A closure running one forward (and backward) the way a training step does."""
    names = ("static_means", "static_quats", "actor_means", "actor_quats")
    leaves = {k: scene[k].detach().clone().requires_grad_() for k in names}
    corr = None
    if with_corrections:
        corr = PoseCorrections(*(c.detach().clone().requires_grad_() for c in scene["corrections"]))
    wrt = list(leaves.values()) + (list(corr) if corr is not None else [])
    n = scene["static_means"].shape[0] + scene["actor_means"].shape[0]
    dev = t.device
    upstream = (torch.randn(n, 3, device=dev), torch.randn(n, 4, device=dev))

    def call():
        means, quats, vis = impl(
            t, **leaves, actor_index=scene["actor_index"], tracks=scene["tracks"], pose_corrections=corr
        )
        if backward:
            return torch.autograd.grad((means, quats), wrt, upstream)
        return means, quats, vis

    return call


def check(scene: dict, t: torch.Tensor) -> None:
    """Our results against the twin's, on the benchmark's own inputs and device."""
    for with_corr in (False, True):
        ours = make_calls(scene, t, with_corr, backward=False, impl=interpolate_gaussians)()
        ref = make_calls(scene, t, with_corr, backward=False, impl=interpolate_gaussians_reference)()
        dm = (ours[0] - ref[0]).abs().max().item()
        dq = (ours[1] - ref[1]).abs().max().item()
        dv = (ours[2] != ref[2]).sum().item()
        torch.manual_seed(1)
        g_ours = make_calls(scene, t, with_corr, backward=True, impl=interpolate_gaussians)()
        torch.manual_seed(1)
        g_ref = make_calls(scene, t, with_corr, backward=True, impl=interpolate_gaussians_reference)()
        rel = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-12)).item() for a, b in zip(g_ours, g_ref))
        print(
            f"  check vs torch twin ({'with' if with_corr else 'no'} corrections): max |d means| {dm:.2e} m, "
            f"max |d quats| {dq:.2e}, visibility mismatches {dv}, max relative gradient error {rel:.2e}"
        )
    if t.device.type == "cuda":
        call = make_calls(scene, t, True, backward=True, impl=interpolate_gaussians)
        call()
        torch.cuda.synchronize()
        try:
            torch.cuda.set_sync_debug_mode("error")
            call()
            print("  no torch host synchronisation in forward + backward: ok")
        except RuntimeError as err:
            print(f"  host synchronisation detected: {err}")
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--small", action="store_true", help="a small configuration (smoke test, e.g. on CPU)")
    p.add_argument("--reps", type=int, default=None, help="timed repetitions (default 200 on GPU, 20 on CPU)")
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--rounds", type=int, default=5,
                   help="eager and host timings: rounds of --reps calls; the best round's median is reported")
    p.add_argument("--time", type=float, default=15.3, help="query time in seconds")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()

    device = torch.device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    reps = args.reps or (200 if device.type == "cuda" else 20)
    if args.small:
        n_static, n_actors, per_actor, n_keys = 20_000, 8, 500, 30
    else:
        n_static, n_actors, per_actor, n_keys = 1_000_000, 200, 5_000, 300

    import warp as wp

    scene = build_scene(device, n_static, n_actors, per_actor, n_keys, seed=args.seed)
    t = torch.tensor(args.time, dtype=torch.float32, device=device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(
        f"interp: {n_static:,} static + {n_actors} actors x {per_actor:,} Gaussians, {n_keys} keys each, "
        f"t = {args.time} s, float32, {device} ({name})"
    )
    print(f"  torch {torch.__version__}, warp {wp.__version__}, reps {reps}, warm-up {args.warmup}")
    check(scene, t)

    rows, spread = [], []
    for label, corr, bwd in (
        ("forward", False, False),
        ("forward, pose corrections", True, False),
        ("forward + backward", False, True),
        ("forward + backward, pose corrections", True, True),
    ):
        ours = make_calls(scene, t, corr, bwd, interpolate_gaussians)
        ref = make_calls(scene, t, corr, bwd, interpolate_gaussians_reference)
        eager_rounds = time_eager(ours, device, reps, args.warmup, args.rounds)
        host_rounds = time_host(ours, device, min(reps, 50), args.rounds)
        graph = time_graph(ours, device, reps)
        torch_us = time_eager(ref, device, max(reps // 4, 5), max(args.warmup // 2, 2))[0]
        eager, host = min(eager_rounds), min(host_rounds)
        spread.append((label, eager_rounds, host_rounds))
        rows.append((label, eager, graph, host, torch_us))
        del ours, ref
        if device.type == "cuda":
            torch.cuda.empty_cache()

    fmt = lambda x: f"{x:9.1f}" if isinstance(x, float) else f"{x:>9}"  # noqa: E731
    print()
    print("| case | warp eager (us) | warp graph (us) | warp host (us) | torch (us) | speed-up eager | speed-up graph |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for label, eager, graph, host, torch_us in rows:
        su_graph = f"{torch_us / graph:.1f}x" if isinstance(graph, float) else "n/a"
        print(
            f"| {label} | {fmt(eager)} | {fmt(graph)} | {fmt(host)} | {fmt(torch_us)} | "
            f"{torch_us / eager:.1f}x | {su_graph} |"
        )
    if args.rounds > 1:
        print()
        print(f"eager and host: the best of {args.rounds} rounds' medians (other work on the machine slows whole "
              "rounds); every round:")
        for label, eager_rounds, host_rounds in spread:
            print(f"  {label}: eager {' '.join(f'{x:.1f}' for x in eager_rounds)} us; "
                  f"host {' '.join(f'{x:.1f}' for x in host_rounds)} us")
    fwd = rows[0]
    print()
    caveat = "" if device.type == "cuda" and not args.small else " (targets apply to the full configuration on the GPU)"
    for name, us in (("eager", fwd[1]), ("graph", fwd[2])):
        if isinstance(us, float):
            verdict = "met" if fwd[4] / us >= TARGET_SPEEDUP and us <= TARGET_US else "NOT met"
            print(f"forward target (>= {TARGET_SPEEDUP:.0f}x and <= {TARGET_US:.0f} us), {name}: "
                  f"{fwd[4] / us:.1f}x, {us:.1f} us -> {verdict}{caveat}")


if __name__ == "__main__":
    main()
