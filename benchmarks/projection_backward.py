"""`projection-backward`: the camera projection's hand-written backward against Warp's generated adjoint.

    python benchmarks/projection_backward.py --device cuda:0                        # 1,000,000 Gaussians
    python benchmarks/projection_backward.py --device cpu --gaussians 2000 --reps 3  # smoke test

drive30's rig (``nurec_usd.synth.presets``): six cameras at 1280x720, OpenCV, f-theta and pinhole
with top-to-bottom rolling shutters, two fisheyes read left to right and right to left, and a
global-shutter pinhole, mounted as in the preset on a rig that drives at 12 m/s and turns at
0.2 rad/s through every readout (the preset's readout times). Gaussians are scattered uniformly
around the rig (x in [-40, 60] m, y in [-30, 30] m, z in [-0.5, 8] m; seed 0) with log-uniform
scales from 2 cm to 0.5 m, random quaternions and opacities U(0.05, 1); the gradients of the
projection's outputs are random normal (only the visible pairs' are read).

Timed (``benchmarks.timing.median_ms``: CUDA events, after warm-up, median of ``--reps``):
the projection's forward (for scale), ``projection_backward(generated=True)`` (Warp's adjoint of
the projection, one thread per camera and Gaussian adding with atomics, after zero fills) and
``projection_backward(generated=False)`` (the hand-written backward, one thread per Gaussian).
Both backwards must agree: the largest difference of each gradient, relative to its largest
entry, is printed, and the run fails above ``--tolerance``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.timing import median_ms  # noqa: E402
from nurec_usd.ops import camera  # noqa: E402
from nurec_usd.ops.camera import CameraBatch, RenderSettings, projection_backward  # noqa: E402
from nurec_usd.ops.warp_torch import launch, warp_device  # noqa: E402
from nurec_usd.synth.presets import get_preset  # noqa: E402
from nurec_usd.synth.raycast import camera_extrinsics  # noqa: E402

SPEED = 12.0  # m/s along the rig's x
YAW_RATE = 0.2  # rad/s about the rig's z


def rig_pose(seconds: float) -> np.ndarray:
    """T_world_rig at this many seconds from the middle of the readouts."""
    a = YAW_RATE * seconds
    T = np.eye(4)
    T[:3, :3] = [[math.cos(a), -math.sin(a), 0.0], [math.sin(a), math.cos(a), 0.0], [0.0, 0.0, 1.0]]
    T[0, 3] = SPEED * seconds
    return T


def drive30_cameras(device: torch.device, dtype: torch.dtype) -> CameraBatch:
    """drive30's six cameras, T_camera_world at the start and at the end of each one's readout."""
    specs = get_preset("drive30").cameras
    start, end = [], []
    for spec in specs:
        half = 0.5 * spec.readout_us * 1e-6
        T_rig_camera = camera_extrinsics(spec)
        start.append(np.linalg.inv(rig_pose(-half) @ T_rig_camera))
        end.append(np.linalg.inv(rig_pose(half) @ T_rig_camera))
    w, h = specs[0].width, specs[0].height
    assert all((s.width, s.height) == (w, h) for s in specs)
    cams = CameraBatch.create([s.model for s in specs], [dict(s.intrinsics) for s in specs], w, h,
                              torch.tensor(np.stack(start), dtype=torch.float64),
                              torch.tensor(np.stack(end), dtype=torch.float64), [s.shutter for s in specs])
    moved = {name: getattr(cams, name).to(device) for name in ("model", "shutter")}
    moved.update({name: getattr(cams, name).to(device=device, dtype=dtype).contiguous()
                  for name in ("params", "rot_start", "trans_start", "rot_end", "trans_end")})
    return CameraBatch(width=w, height=h, pinhole_global=cams.pinhole_global, **moved)


def gaussians(n: int, device: torch.device, dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    lo, hi = torch.tensor([-40.0, -30.0, -0.5]), torch.tensor([60.0, 30.0, 8.0])
    means = lo + (hi - lo) * torch.rand(n, 3, generator=g)
    quats = torch.randn(n, 4, generator=g)
    scales = torch.exp(math.log(0.02) + (math.log(0.5) - math.log(0.02)) * torch.rand(n, 3, generator=g))
    opacities = 0.05 + 0.95 * torch.rand(n, generator=g)
    return [t.to(device=device, dtype=dtype).contiguous() for t in (means, quats, scales, opacities)]


def project(params: list[torch.Tensor], cams: CameraBatch, settings: RenderSettings) -> list[torch.Tensor]:
    """The projection's forward: means2d, conics, depths, radii, dirs, opacities2d [C, N, (k)]."""
    means = params[0]
    c, n, dtype, device = len(cams), len(means), means.dtype, means.device
    outs = [torch.empty(c, n, 2, dtype=dtype, device=device), torch.empty(c, n, 3, dtype=dtype, device=device),
            torch.empty(c, n, dtype=dtype, device=device), torch.empty(c, n, dtype=torch.int32, device=device),
            torch.empty(c, n, 3, dtype=dtype, device=device), torch.empty(c, n, dtype=dtype, device=device)]
    launch(camera._kernels(dtype)[0], (c, n), camera._camera_inputs(*params, cams, settings), outs,
           device=warp_device(device))
    return outs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--gaussians", type=int, default=1_000_000)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--tolerance", type=float, default=None,
                    help="largest difference of the two backwards allowed, relative to each gradient's largest "
                         "entry (default: 1e-3 for float32, 1e-9 for float64)")
    args = ap.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    tolerance = args.tolerance if args.tolerance is not None else (1e-3 if dtype == torch.float32 else 1e-9)

    cams = drive30_cameras(device, dtype)
    assert not cams.pinhole_global
    settings = RenderSettings()
    params = gaussians(args.gaussians, device, dtype)
    means2d, conics, depths, radii, dirs, _ = project(params, cams, settings)
    g = torch.Generator(device=device).manual_seed(1)
    grads = [torch.randn(t.shape, generator=g, device=device, dtype=dtype) for t in (means2d, conics, depths, dirs)]

    def backward(generated: bool):
        return projection_backward(*params, cams, settings, radii, *grads, generated=generated)

    generated, hand = backward(True), backward(False)
    errors = {name: float(((a - b).abs().max() / b.abs().max()).item())
              for name, a, b in zip(("means", "quats", "scales"), hand, generated)}
    t_fwd = median_ms(lambda: project(params, cams, settings), device, args.reps)
    t_gen = median_ms(lambda: backward(True), device, args.reps)
    t_hand = median_ms(lambda: backward(False), device, args.reps)

    visible = (radii > 0).sum(dim=1).tolist()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    print(f"projection-backward on {name}, torch {torch.__version__}, {args.dtype}, median of {args.reps}")
    print(f"drive30 rig: {len(cams)} cameras at {cams.width}x{cams.height}, {args.gaussians:,} Gaussians; "
          f"visible per camera: {', '.join(f'{v:,}' for v in visible)}")
    print("| forward | generated adjoint | hand-written backward | speed-up |")
    print("|---|---|---|---|")
    print(f"| {t_fwd:.3f} ms | {t_gen:.3f} ms | {t_hand:.3f} ms | {t_gen / t_hand:.2f}x |")
    print("largest difference / largest entry: " + ", ".join(f"{k} {v:.1e}" for k, v in errors.items()))
    if not all(v <= tolerance for v in errors.values()):
        print(f"MISMATCH: the backwards differ by more than {tolerance:.0e}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
