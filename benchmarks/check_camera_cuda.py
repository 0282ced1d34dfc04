"""GPU correctness check of the camera renderer (CI has no GPU): CUDA results against the
torch twin (on the GPU too), forward and backward, float32 and float64, every camera model
with rolling shutters. The warp-level reductions of the backward only exist on CUDA, so
this is where they are checked; so is the CUDA graph of ``GraphedCameraRenderer``, whose
replays must equal eager renders at the same poses, and the forward without the depth image,
whose colour and alpha must equal the full forward's.

    python benchmarks/check_camera_cuda.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras  # noqa: E402
from nurec_usd.ops.reference import render_cameras_reference  # noqa: E402
from nurec_usd.ops.graphed import GraphedCameraRenderer  # noqa: E402
from nurec_usd.sensors.se3 import make_transform, quat_to_matrix  # noqa: E402
from ops.test_camera_render import H, MODELS, PARAMS, SHUTTERS, W, make_cameras, make_gaussians  # noqa: E402


def to(cams: CameraBatch, device) -> CameraBatch:
    return CameraBatch(*(getattr(cams, f).to(device) for f in
                         ("model", "params", "rot_start", "trans_start", "rot_end", "trans_end", "shutter")),
                       cams.width, cams.height)


def run(dtype, n: int, tol_fwd: float, tol_grad: float) -> bool:
    device = torch.device("cuda:0")
    ok = True
    params = [p.to(device).requires_grad_(True) for p in make_gaussians(n, dtype)]
    cams = to(make_cameras(dtype), device)
    bg = torch.tensor([0.1, 0.2, 0.3], dtype=dtype, device=device)
    ours = render_cameras(*params, cams, sh_degree=3, background=bg)
    ref = render_cameras_reference(*params, cams, sh_degree=3, background=bg)
    w = [torch.randn(t.shape, dtype=dtype, device=device, generator=torch.Generator(device).manual_seed(i))
         for i, t in enumerate((ours.rgb, ours.alpha, ours.depth))]
    loss = sum((a * b).sum() for a, b in zip((ours.rgb, ours.alpha, ours.depth), w))
    loss_ref = sum((a * b).sum() for a, b in zip(ref[:3], w))
    g = torch.autograd.grad(loss, params)
    g_ref = torch.autograd.grad(loss_ref, params)
    fwd = max((ours.rgb - ref[0]).abs().max().item(), (ours.alpha - ref[1]).abs().max().item())
    print(f"{str(dtype):14s} n={n}: max |rgb, alpha - twin| = {fwd:.2e}")
    ok &= fwd < tol_fwd
    plain = render_cameras(*params, cams, sh_degree=3, background=bg, settings=RenderSettings(depth=False))
    same = max((plain.rgb - ours.rgb).abs().max().item(), (plain.alpha - ours.alpha).abs().max().item())
    print(f"{str(dtype):14s} n={n}: without the depth image, max |rgb, alpha - with it| = {same:.2e}")
    ok &= plain.depth is None and same == 0.0
    for name, a, b in zip(("means", "quats", "scales", "opacities", "sh"), g, g_ref):
        err = ((a - b).norm() / b.norm()).item()
        print(f"    grad {name:10s} relative error {err:.2e}")
        ok &= err < tol_grad
    return ok


def run_graphed(dtype, n: int, depth: bool = True) -> bool:
    """Graph replays at three poses against eager renders there: the same kernels; the eager
    batch's quaternions come from the host, so float32 rounding differs slightly (a stale or
    wrong pose would differ by far more than the tolerance)."""
    device = torch.device("cuda:0")
    params = [p.to(device) for p in make_gaussians(n, dtype)]
    cams = to(make_cameras(dtype), device)
    renderer = GraphedCameraRenderer(*params, cams, sh_degree=3, depth=depth)
    start = make_transform(quat_to_matrix(cams.rot_start), cams.trans_start)
    end = make_transform(quat_to_matrix(cams.rot_end), cams.trans_end)
    worst = 0.0
    for shift in (0.0, 0.2, -0.3):
        move = torch.eye(4, dtype=dtype, device=device)
        move[0, 3] = shift
        s, e = move @ start, move @ end
        ours = renderer.render(s, e)
        eager = render_cameras(*params, to(CameraBatch.create(MODELS, [PARAMS[m] for m in MODELS], W, H, s.cpu(),
                                                               e.cpu(), SHUTTERS), device),
                               sh_degree=3, settings=RenderSettings(capacity=renderer.capacity))
        if not depth and ours.depth is not None:
            print(f"{str(dtype):14s} n={n}: a replay without the depth image returned one")
            return False
        worst = max(worst, (ours.rgb - eager.rgb).abs().max().item(), (ours.alpha - eager.alpha).abs().max().item())
    print(f"{str(dtype):14s} n={n}, depth {depth}: graph replay against eager render, max |difference| = "
          f"{worst:.2e}")
    return worst <= 1e-4


if __name__ == "__main__":
    ok = run(torch.float32, 3000, 1e-4, 5e-4)  # float32 atomics reorder sums over ~1e4 terms
    ok &= run(torch.float64, 3000, 1e-10, 1e-10)
    ok &= run_graphed(torch.float32, 3000)
    ok &= run_graphed(torch.float32, 3000, depth=False)
    print("CUDA check:", "PASSED" if ok else "FAILED")
    sys.exit(0 if ok else 1)
