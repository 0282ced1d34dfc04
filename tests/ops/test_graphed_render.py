"""The graphed camera renderer renders what ``render_cameras`` renders at the same poses.

On the CPU (CI) ``GraphedCameraRenderer.render`` runs the eager path through its own pose
buffers and fixed capacity; the CUDA graph itself is checked against the eager render on
the GPU by ``benchmarks/check_camera_cuda.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from ops.test_camera_render import MODELS, PARAMS, SHUTTERS, H, W, make_cameras, make_gaussians

from nurec_usd.ops.camera import CameraBatch, RenderSettings, render_cameras
from nurec_usd.ops.graphed import GraphedCameraRenderer


def _turned(T: torch.Tensor, yaw: float, shift: float) -> torch.Tensor:
    """The poses T turned about their camera y axis and moved along x (camera frame)."""
    c, s = math.cos(yaw), math.sin(yaw)
    M = torch.tensor([[c, 0, s, shift], [0, 1, 0, 0], [-s, 0, c, 0], [0, 0, 0, 1]], dtype=T.dtype)
    return M @ T


def _poses(cams: CameraBatch) -> tuple[torch.Tensor, torch.Tensor]:
    from nurec_usd.sensors.se3 import make_transform, quat_to_matrix

    return (make_transform(quat_to_matrix(cams.rot_start), cams.trans_start),
            make_transform(quat_to_matrix(cams.rot_end), cams.trans_end))


def _batch_at(start: torch.Tensor, end: torch.Tensor, moving: bool = True) -> CameraBatch:
    """``make_cameras``' batch at other poses."""
    shutters = SHUTTERS if moving else None
    return CameraBatch.create(MODELS, [PARAMS[m] for m in MODELS], W, H, start, end if moving else None, shutters)


@pytest.mark.parametrize("sh_degree", [None, 2])
def test_renders_match_render_cameras_at_each_pose(sh_degree):
    params = make_gaussians(300, torch.float64)
    if sh_degree is None:
        params[4] = params[4][:, 0, :].sigmoid()
    cams = make_cameras(torch.float64, moving=True)  # every camera model, three rolling shutters
    background = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
    renderer = GraphedCameraRenderer(*params, cams, sh_degree=sh_degree, background=background)
    start, end = _poses(cams)
    settings = RenderSettings(capacity=renderer.capacity)
    for yaw, shift in ((0.0, 0.0), (0.15, 0.2), (-0.1, -0.3)):
        s, e = _turned(start, yaw, shift), _turned(end, yaw, shift)
        ours = renderer.render(s, e)
        ref = render_cameras(*params, _batch_at(s, e), sh_degree=sh_degree, background=background,
                             settings=settings)
        for name in ("rgb", "alpha", "depth", "radii", "intersections"):
            torch.testing.assert_close(getattr(ours, name), getattr(ref, name), rtol=1e-12, atol=1e-12, msg=name)
        assert not bool(ours.overflow)
        assert ours.alpha.max() > 0.5  # the poses still see the Gaussians


def test_without_depth_image_renders_colour_and_alpha_only():
    params = make_gaussians(200, torch.float32, seed=3)
    cams = make_cameras(torch.float32, moving=True)
    full = GraphedCameraRenderer(*params, cams, sh_degree=3)
    plain = GraphedCameraRenderer(*params, cams, sh_degree=3, depth=False, capacity=full.capacity)
    start, end = _poses(cams)
    a, b = full.render(start, end), plain.render(start, end)
    assert a.depth is not None and b.depth is None
    assert torch.equal(a.rgb, b.rgb) and torch.equal(a.alpha, b.alpha)


def test_gaussians_are_copied_and_global_shutters_take_one_pose():
    params = make_gaussians(200, torch.float32)
    cams = make_cameras(torch.float32, moving=False)
    renderer = GraphedCameraRenderer(*params, cams, sh_degree=3)
    start, _ = _poses(cams)
    before = renderer.render(start).rgb.clone()
    params[0] += 10.0  # the caller's tensors change; the renderer keeps its copy
    torch.testing.assert_close(renderer.render(start).rgb, before, rtol=0, atol=0)


def test_overflow_is_reported_and_grow_makes_room():
    params = make_gaussians(300, torch.float32)
    cams = make_cameras(torch.float32, moving=False)
    renderer = GraphedCameraRenderer(*params, cams, sh_degree=3, capacity=16)
    start, _ = _poses(cams)
    short = renderer.render(start)
    assert bool(short.overflow)
    assert renderer.grow(short) and renderer.capacity > 16
    full = renderer.render(start)
    assert not bool(full.overflow)
    exact = render_cameras(*params, cams, sh_degree=3)
    # float32: the renderer's quaternions come from its own kernel, the batch's from torch
    torch.testing.assert_close(full.rgb, exact.rgb, rtol=1e-5, atol=1e-5)
    assert not renderer.grow(full)


def test_bad_pose_shapes_are_refused():
    params = make_gaussians(50, torch.float32)
    cams = make_cameras(torch.float32)
    renderer = GraphedCameraRenderer(*params, cams, sh_degree=3)
    with pytest.raises(ValueError, match=r"T_camera_world_start must have shape \(4, 4, 4\)"):
        renderer.render(torch.eye(4).repeat(3, 1, 1))
    with pytest.raises(ValueError, match="T_camera_world_end"):
        renderer.render(torch.eye(4).repeat(4, 1, 1), torch.eye(4))


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.float64, 1e-14)])
def test_camera_poses_kernel_matches_torch(dtype, tol):
    """The pose kernel against se3.matrix_to_quat (its twin), up to the quaternions' sign, on
    random rotations and ones near 180 degrees; the end quaternion in the start's hemisphere."""
    from nurec_usd.ops.warp_torch import launch, warp_device
    from nurec_usd.sensors.se3 import make_transform, matrix_to_quat, quat_to_matrix
    from warp_kernels import camera_project as kproj

    g = torch.Generator().manual_seed(3)
    q = torch.randn(40, 4, generator=g, dtype=torch.float64)
    q[:8, 0] = 1e-4 * torch.randn(8, generator=g, dtype=torch.float64)  # near 180 degrees
    T0 = make_transform(quat_to_matrix(q), torch.randn(40, 3, generator=g, dtype=torch.float64)).to(dtype)
    T1 = make_transform(quat_to_matrix(torch.randn(40, 4, generator=g, dtype=torch.float64)),
                        torch.randn(40, 3, generator=g, dtype=torch.float64)).to(dtype)
    out = [torch.empty(40, k, dtype=dtype) for k in (4, 3, 4, 3)]
    kernel = kproj.camera_poses_f32 if dtype == torch.float32 else kproj.camera_poses_f64
    launch(kernel, 40, [T0.contiguous(), T1.contiguous()], out, device=warp_device(torch.device("cpu")))
    for got, T in ((out[0], T0), (out[2], T1)):
        want = matrix_to_quat(T[:, :3, :3])
        sign = torch.where((got * want).sum(-1, keepdim=True) < 0, -1.0, 1.0).to(dtype)
        torch.testing.assert_close(got * sign, want, rtol=0, atol=tol * 10)
    torch.testing.assert_close(out[1], T0[:, :3, 3], rtol=0, atol=0)
    torch.testing.assert_close(out[3], T1[:, :3, 3], rtol=0, atol=0)
    assert bool(((out[0] * out[2]).sum(-1) >= 0).all())
