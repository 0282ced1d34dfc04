"""`launches`: the host time of a Warp launch, recorded (``ops.warp_torch.launch``) against public.

    python benchmarks/launch_cost.py --device cuda:0
    python benchmarks/launch_cost.py --device cpu        # the kernel runs inside the call on the CPU

``launch`` records a launch once and rewrites its argument slots in place, then calls Warp's
native launcher; ``launch_public`` (what ``RECORDED_LAUNCHES = False`` selects) calls
``wp.launch`` with ``wp.from_torch`` views on every call, through Warp's public API alone.
Timed: the host's median microseconds per launch of an empty kernel with six array arguments
and two scalars (the shape of the renderers' launches), and the host's median milliseconds of a
camera render's forward and forward + backward (``benchmarks.timing.host_ms``: the Python that
queues the work, not the work) on 20,000 Gaussians and 4 small cameras of every model.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import warp as wp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import host_ms  # noqa: E402
from nurec_usd.ops import warp_torch  # noqa: E402
from nurec_usd.ops.camera import CameraBatch, render_cameras  # noqa: E402
from nurec_usd.ops.warp_torch import init_warp, warp_device  # noqa: E402


@wp.kernel
def _six_arrays(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.vec3), c: wp.array(dtype=wp.float32),
                d: wp.array(dtype=wp.int32), e: wp.array(dtype=wp.float32), f: wp.array(dtype=wp.float32),
                n: int, s: float):
    wp.tid()


def per_launch_us(device: torch.device, reps: int) -> float:
    """Median host microseconds of one launch (over blocks of 100)."""
    wdev = warp_device(device)
    args = [torch.zeros(64, device=device), torch.zeros(64, 3, device=device), torch.zeros(64, device=device),
            torch.zeros(64, dtype=torch.int32, device=device), torch.zeros(64, device=device),
            torch.zeros(64, device=device), 3, 1.0]
    for _ in range(100):
        warp_torch.launch(_six_arrays, 64, args, device=wdev)
    blocks = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(100):
            warp_torch.launch(_six_arrays, 64, args, device=wdev)
        blocks.append((time.perf_counter() - t0) * 1e4)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    return statistics.median(blocks)


def render_inputs(device: torch.device):
    g = torch.Generator().manual_seed(0)
    n = 20_000
    means = torch.randn(n, 3, generator=g) * torch.tensor([3.0, 2.0, 1.0]) + torch.tensor([0.0, 0.0, 8.0])
    quats = torch.randn(n, 4, generator=g)
    scales = torch.rand(n, 3, generator=g) * 0.05 + 0.01
    opacities = torch.rand(n, generator=g) * 0.9 + 0.05
    sh = torch.randn(n, 4, 3, generator=g) * 0.3
    params = [t.to(device) for t in (means, quats, scales, opacities, sh)]
    models = ["pinhole", "opencv", "opencv_fisheye", "ftheta"]
    intrinsics = [{"fx": 200.0, "fy": 200.0, "cx": 160.0, "cy": 90.0},
                  {"fx": 200.0, "fy": 200.0, "cx": 160.0, "cy": 90.0, "k1": -0.1, "k2": 0.01, "p1": 0.0,
                   "p2": 0.0, "k3": 0.0, "k4": 0.0, "k5": 0.0, "k6": 0.0},
                  {"fx": 150.0, "fy": 150.0, "cx": 160.0, "cy": 90.0, "k1": 0.02, "k2": 0.0, "k3": 0.0, "k4": 0.0},
                  {"cx": 160.0, "cy": 90.0, "angle_to_pixel": [0.0, 150.0, 0.0, -2.0], "max_fov_deg": 190.0}]
    poses = torch.eye(4, dtype=torch.float64).repeat(4, 1, 1)
    cams = CameraBatch.create(models, intrinsics, 320, 180, poses, poses, ["global", "top_to_bottom",
                                                                         "left_to_right", "global"])
    cams = CameraBatch(width=cams.width, height=cams.height, pinhole_global=cams.pinhole_global,
                       model=cams.model.to(device), shutter=cams.shutter.to(device),
                       **{k: getattr(cams, k).to(device=device, dtype=torch.float32).contiguous()
                          for k in ("params", "rot_start", "trans_start", "rot_end", "trans_end")})
    return params, cams


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    init_warp()
    params, cams = render_inputs(device)
    leaves = [p.clone().requires_grad_(True) for p in params]

    def forward():
        return render_cameras(*params, cams, sh_degree=1)

    def forward_backward():
        out = render_cameras(*leaves, cams, sh_degree=1)
        out.rgb.sum().backward()

    rows = []
    for recorded in (True, False):
        warp_torch.RECORDED_LAUNCHES = recorded
        rows.append(("recorded (launch)" if recorded else "public (launch_public)", per_launch_us(device, args.reps),
                     host_ms(forward, device, args.reps), host_ms(forward_backward, device, args.reps)))
    warp_torch.RECORDED_LAUNCHES = True
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"launches on {name}, torch {torch.__version__}, warp {wp.__version__}, host medians of {args.reps}")
    print("| launches | per launch (6 arrays, 2 scalars) | camera render forward | forward + backward |")
    print("|---|---|---|---|")
    for label, us, f, fb in rows:
        print(f"| {label} | {us:.1f} us | {f:.2f} ms | {fb:.2f} ms |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
