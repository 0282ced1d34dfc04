"""Benchmark ``interp``, before and after: another commit's interpolation against this tree's, in one process.

The eager time of the interpolation's forward is the host's (Python) time, and the host's speed
on a shared machine drifts by up to 2x between minutes: two benchmark runs minutes apart can
differ more than two versions of the code. This times both versions in the same process,
alternating round by round, on the benchmark's inputs (``benchmarks/interp.py``, PERF.md
configuration), so a drift slows both alike.

The baseline's ``nurec_usd`` and ``warp_kernels`` are exported from git (``git archive``) into a
temporary folder and imported as ``baseline_nurec_usd`` and ``baseline_warp_kernels`` (their
imports rewritten to those names; Warp compiles their kernels as modules of their own).

    PYTHONPATH=. python benchmarks/interp_ab.py --baseline 6424de1          # cuda:0
    PYTHONPATH=. python benchmarks/interp_ab.py --baseline HEAD~1 --device cpu --small --rounds 2
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Callable

import torch

from benchmarks.interp import build_scene
from nurec_usd.ops.interpolate import interpolate_gaussians

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("nurec_usd", "warp_kernels")


def export_baseline(rev: str, folder: Path) -> None:
    """Write ``rev``'s packages into ``folder`` as ``baseline_<name>``, their imports renamed."""
    archive = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", rev, *PACKAGES],
                             check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        try:
            tar.extractall(folder, filter="data")
        except TypeError:  # Python before 3.10.12 / 3.11.4: no extraction filters (our own archive)
            tar.extractall(folder)
    pattern = re.compile(r"\b(" + "|".join(PACKAGES) + r")\b")
    for name in PACKAGES:
        (folder / name).rename(folder / f"baseline_{name}")
        for path in (folder / f"baseline_{name}").rglob("*.py"):
            path.write_text(pattern.sub(r"baseline_\1", path.read_text()))


def time_rounds(fn: Callable[[], object], device: torch.device, reps: int) -> tuple[float, float]:
    """Median eager (CUDA events around the call, from an idle device) and host microseconds."""
    cuda = device.type == "cuda"
    eager, host = [], []
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize(device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            eager.append(start.elapsed_time(end) * 1e3)
        else:
            t0 = time.perf_counter()
            out = fn()
            eager.append((time.perf_counter() - t0) * 1e6)
        del out  # released outside the timed span, as in benchmarks.timing
    for _ in range(reps):
        if cuda:
            torch.cuda.synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        host.append((time.perf_counter() - t0) * 1e6)
        del out
    return statistics.median(eager), statistics.median(host)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--baseline", required=True, help="the git revision to compare against (e.g. HEAD~1)")
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--small", action="store_true", help="a small configuration (smoke test, e.g. on CPU)")
    p.add_argument("--rounds", type=int, default=10, help="alternating rounds (each version once per round)")
    p.add_argument("--reps", type=int, default=200, help="calls per version and round")
    p.add_argument("--time", type=float, default=15.3, help="query time in seconds")
    args = p.parse_args()

    device = torch.device(args.device)
    folder = Path(tempfile.mkdtemp(prefix="interp_ab_"))
    export_baseline(args.baseline, folder)
    sys.path.insert(0, str(folder))
    baseline = importlib.import_module("baseline_nurec_usd.ops.interpolate")

    sizes = (20_000, 8, 500, 30) if args.small else (1_000_000, 200, 5_000, 300)
    scene = build_scene(device, *sizes)
    tracks = scene["tracks"]
    base_tracks = baseline.TrackKeys(tracks.key_offsets, tracks.key_times, tracks.key_translations, tracks.key_quats)
    t = torch.tensor(args.time, dtype=torch.float32, device=device)
    leaves = {k: scene[k].detach().clone().requires_grad_()
              for k in ("static_means", "static_quats", "actor_means", "actor_quats")}
    calls = {
        f"baseline {args.baseline}": lambda: baseline.interpolate_gaussians(
            t, **leaves, actor_index=scene["actor_index"], tracks=base_tracks),
        "this tree": lambda: interpolate_gaussians(t, **leaves, actor_index=scene["actor_index"], tracks=tracks),
    }
    outputs = [fn() for fn in calls.values()]
    diff = max((a - b).abs().max().item() for a, b in zip(*outputs))
    print(f"interp A/B on {device}: {sizes[0]:,} static + {sizes[1]} actors x {sizes[2]:,} Gaussians, "
          f"{args.rounds} rounds x {args.reps} calls; max |baseline - this tree| = {diff:.2e}")
    for fn in calls.values():  # warm-up
        for _ in range(20):
            fn()
    results = {name: [] for name in calls}
    for _ in range(args.rounds):
        for name, fn in calls.items():
            results[name].append(time_rounds(fn, device, args.reps))
    print("| version | eager best / median of rounds (us) | host best / median of rounds (us) |")
    print("|---|---:|---:|")
    for name, rounds in results.items():
        eager, host = [r[0] for r in rounds], [r[1] for r in rounds]
        print(f"| {name} | {min(eager):.1f} / {statistics.median(eager):.1f} | "
              f"{min(host):.1f} / {statistics.median(host):.1f} |")


if __name__ == "__main__":
    main()
