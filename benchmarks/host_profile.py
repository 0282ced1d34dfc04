"""Where the host (Python) time of a render goes: cProfile of camera and lidar renders.

    python benchmarks/host_profile.py [--device cuda:0] [--reps 50]

A render's GPU work is queued by Python; when queuing takes longer than the GPU needs, the
host sets the time. This profiles forward and forward+backward of a small camera batch and
of the benchmark lidar (the same inputs as ``raster_camera.py`` row 1 in size, and
``raster_lidar.py`` at 1M Gaussians) and prints the functions with the most own time.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from benchmarks.timing import host_ms  # noqa: E402
from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras  # noqa: E402
from nurec_usd.ops.lidar import LidarRenderSettings, render_lidar  # noqa: E402
from ops.test_lidar_render import street_lidar, street_scene  # noqa: E402


def camera_calls(device: torch.device):
    g = torch.Generator().manual_seed(0)
    n = 110_000
    means = torch.rand(n, 3, generator=g) * 4 - 2 + torch.tensor([0.0, 0.0, 6.0])
    quats = torch.nn.functional.normalize(torch.randn(n, 4, generator=g), dim=-1)
    scales = torch.rand(n, 3, generator=g) * 0.02
    params = [t.to(device) for t in (means, quats, scales, torch.rand(n, generator=g), torch.rand(n, 3, generator=g))]
    leaves = [p.clone().requires_grad_(True) for p in params]
    K = torch.tensor([[500.0, 0, 324], [0, 500.0, 210], [0, 0, 1]]).repeat(3, 1, 1)
    cams = CameraBatch.pinhole(torch.eye(4).repeat(3, 1, 1).to(device), K.to(device), 648, 420)
    settings = RenderSettings(capacity=int(int(render_cameras(*params, cams).intersections) * 1.2) + 1)

    def fwd():
        render_cameras(*params, cams, settings=settings)

    def fwd_bwd():
        render_cameras(*leaves, cams, settings=settings).rgb.sum().backward()

    return fwd, fwd_bwd


def lidar_calls(device: torch.device):
    lidar = street_lidar(128, 2048, device=device)
    params = [p.to(device) for p in street_scene(1_000_000, seed=0)]
    leaves = [p.clone().requires_grad_(True) for p in params]
    settings = LidarRenderSettings(capacity=int(int(render_lidar(*params, lidar).intersections) * 1.2) + 1024)

    def fwd():
        render_lidar(*params, lidar, settings=settings)

    def fwd_bwd():
        o = render_lidar(*leaves, lidar, settings=settings)
        (o.range_sum.sum() + o.hit_prob.sum() + o.intensity_sum.sum() + o.median_range.sum()).backward()

    return fwd, fwd_bwd


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--top", type=int, default=22)
    args = ap.parse_args()
    device = torch.device(args.device)
    for name, make in (("camera", camera_calls), ("lidar", lidar_calls)):
        fwd, fwd_bwd = make(device)
        for label, fn in (("forward", fwd), ("forward+backward", fwd_bwd)):
            print(f"\n== {name} {label}: host {host_ms(fn, device, args.reps):.3f} ms per call (median)", flush=True)
            prof = cProfile.Profile()
            prof.enable()
            for _ in range(args.reps):
                fn()
            prof.disable()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            pstats.Stats(prof).sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
