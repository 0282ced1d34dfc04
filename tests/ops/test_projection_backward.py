"""The projection's hand-written backward (``warp_kernels.camera_project.project_gaussians_backward``)
against Warp's generated adjoint of the same forward, for every camera model and every shutter, in
float64 and float32, with two corner cases (the radial models' optical axis, a line time found
from behind the near plane); a float64 gradcheck of the projection through it; and the renderer's
routing (the hand-written backward by default, the generated adjoint behind a switch)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from nurec_usd.ops import camera
from nurec_usd.ops.camera import CameraBatch, RenderSettings, projection_backward, render_cameras
from nurec_usd.ops.warp_torch import launch, warp_device
from nurec_usd.sensors.se3 import make_transform, quat_to_matrix
from warp_kernels import camera_project as kproj
from warp_kernels.camera_project import FRUSTUM_MARGIN

W, H = 40, 30
MODELS = ["pinhole", "opencv", "opencv_fisheye", "ftheta"]
SHUTTERS = ["global", "top_to_bottom", "bottom_to_top", "left_to_right", "right_to_left"]
# Distortions strong enough that their second derivatives (the Jacobian's gradient) matter
PARAMS = {
    "pinhole": {"fx": 30.0, "fy": 31.0, "cx": 19.5, "cy": 14.5},
    "opencv": {"fx": 30.0, "fy": 30.0, "cx": 20.0, "cy": 15.0, "k1": -0.1, "k2": 0.02, "k3": 0.001, "k4": 0.05,
               "k5": 0.01, "k6": 0.002, "p1": 0.01, "p2": -0.008},
    "opencv_fisheye": {"fx": 20.0, "fy": 20.0, "cx": 19.5, "cy": 14.5, "k1": 0.05, "k2": -0.02, "k3": 0.004,
                       "k4": -0.001},
    "ftheta": {"cx": 19.5, "cy": 14.5, "angle_to_pixel": [0.0, 20.0, 0.8, -1.2, 0.1], "max_fov_deg": 190.0},
}
SETTINGS = RenderSettings()


def _rotation(axis: int, angle: float) -> torch.Tensor:
    c, s = math.cos(angle), math.sin(angle)
    i, j = [k for k in range(3) if k != axis]
    R = torch.eye(3, dtype=torch.float64)
    R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
    return R


def make_cameras(models: list[str], shutters: list[str], dtype) -> CameraBatch:
    """Cameras in different poses that move and turn during the readout: the even ones turn by 0.1
    rad (the slerp of ``pose_at``), the odd ones by 5e-4 rad (its normalised lerp)."""
    start, end = [], []
    for c in range(len(models)):
        R = _rotation(1, 0.4 * c) @ _rotation(0, 0.15 * c)
        t = torch.tensor([0.2 * c, -0.1 * c, 0.05 * c], dtype=torch.float64)
        turn = 0.1 if c % 2 == 0 else 5e-4
        move = torch.tensor([0.15, -0.1, 0.05], dtype=torch.float64)
        start.append(make_transform(R, t))
        end.append(make_transform(_rotation(2, turn) @ _rotation(0, turn) @ R, t + move))
    cams = CameraBatch.create(models, [PARAMS[m] for m in models], W, H, torch.stack(start).to(dtype),
                              torch.stack(end).to(dtype), shutters)
    # pinhole cameras with global shutters too take the general kernels here (as in a mixed rig),
    # not the pinhole ones
    return dataclasses.replace(cams, pinhole_global=False)


def _view_bounds(name: str) -> tuple[float, float, float, float]:
    """``view_bounds`` of a perspective camera: normalised x and y beyond which the Jacobian is clamped."""
    k = PARAMS[name]
    mx, my = FRUSTUM_MARGIN * W, FRUSTUM_MARGIN * H
    return ((-0.5 - mx - k["cx"]) / k["fx"], (W - 0.5 + mx - k["cx"]) / k["fx"],
            (-0.5 - my - k["cy"]) / k["fy"], (H - 0.5 + my - k["cy"]) / k["fy"])


def make_gaussians(cams: CameraBatch, models: list[str], n: int, seed: int, dtype) -> list[torch.Tensor]:
    """n Gaussians per camera placed in its (start) frame: most in view, up to beyond its field of view
    (some culled), a few behind it, and large ones centred beyond the view's margin (perspective
    models: their Jacobian is clamped) whose splats reach into the image."""
    g = torch.Generator().manual_seed(seed)
    R0 = quat_to_matrix(cams.rot_start.double())
    t0 = cams.trans_start.double()
    means, scales = [], []
    for c, name in enumerate(models):
        wide = name in ("opencv_fisheye", "ftheta")
        m = n - n // 4
        theta = torch.rand(m, generator=g, dtype=torch.float64) * (1.8 if wide else 0.95)
        phi = torch.rand(m, generator=g, dtype=torch.float64) * 2 * math.pi
        dist = 1.0 + 5.0 * torch.rand(m, generator=g, dtype=torch.float64)
        p = torch.stack([theta.sin() * phi.cos(), theta.sin() * phi.sin(), theta.cos()], -1) * dist[:, None]
        behind = n // 8
        p[:behind, 2] = -p[:behind, 2].abs() - 0.5  # behind the camera: culled, but where a wide model sees it
        s = 0.03 + 0.12 * torch.rand(m, 3, generator=g, dtype=torch.float64)
        # the edge: centred beyond the margin on each side, big enough to reach into the image
        e = n // 4
        lox, hix, loy, hiy = _view_bounds("pinhole" if wide else name)
        side = torch.arange(e) % 4
        depth = 2.0 + 2.0 * torch.rand(e, generator=g, dtype=torch.float64)
        along = torch.rand(e, generator=g, dtype=torch.float64) - 0.5
        xn = torch.where(side == 0, 1.25 * hix, torch.where(side == 1, 1.25 * lox, along * (hix - lox)))
        yn = torch.where(side == 2, 1.25 * hiy, torch.where(side == 3, 1.25 * loy, along * (hiy - loy)))
        pe = torch.stack([xn * depth, yn * depth, depth], -1)
        se = (0.3 + 0.3 * torch.rand(e, 3, generator=g, dtype=torch.float64)) * depth[:, None] / 3
        pc = torch.cat([p, pe])
        means.append((pc - t0[c]) @ R0[c])  # camera frame -> world (T_camera_world^-1)
        scales.append(torch.cat([s, se]))
    means, scales = torch.cat(means), torch.cat(scales)
    quats = torch.randn(len(means), 4, generator=g, dtype=torch.float64) * 0.7
    opacities = 0.2 + 0.75 * torch.rand(len(means), generator=g, dtype=torch.float64)
    return [t.to(dtype) for t in (means, quats, scales, opacities)]


def project(params: list[torch.Tensor], cams: CameraBatch) -> list[torch.Tensor]:
    """The forward: means2d, conics, depths, radii, dirs [C, N, (k)] (zeros where culled)."""
    means = params[0]
    c, n, dtype = len(cams), len(means), means.dtype
    outs = [torch.zeros(c, n, 2, dtype=dtype), torch.zeros(c, n, 3, dtype=dtype), torch.zeros(c, n, dtype=dtype),
            torch.zeros(c, n, dtype=torch.int32), torch.zeros(c, n, 3, dtype=dtype), torch.zeros(c, n, dtype=dtype)]
    launch(camera._kernels(dtype)[0], (c, n), camera._camera_inputs(*params, cams, SETTINGS), outs,
           device=warp_device(means.device))
    return outs[:5]


def _coverage(params, cams, models, shutters, radii, means2d) -> None:
    """The inputs exercise what they are meant to: visible and culled pairs, clamped Jacobians (the
    perspective models) and rolling shutters' line fractions inside (0, 1) and clamped."""
    visible = radii > 0
    assert int(visible.sum()) >= 100 * len(cams) and int((~visible).sum()) >= 10 * len(cams)
    means = params[0].double()
    R = quat_to_matrix(cams.rot_start.double())
    p = torch.einsum("cij,nj->cni", R, means) + cams.trans_start.double()[:, None]
    for c, (name, shutter) in enumerate(zip(models, shutters)):
        if name in ("pinhole", "opencv"):
            lox, hix, loy, hiy = _view_bounds(name)
            xn, yn = p[c, :, 0] / p[c, :, 2], p[c, :, 1] / p[c, :, 2]
            clamped = (xn > 1.1 * hix) | (xn < 1.1 * lox) | (yn > 1.1 * hiy) | (yn < 1.1 * loy)
            assert int((visible[c] & clamped).sum()) >= 5, f"camera {c}: too few visible splats with a clamped J"
        if shutter != "global":
            uv = means2d[c].double()
            frac = uv[:, 1] / (H - 1) if shutter in ("top_to_bottom", "bottom_to_top") else uv[:, 0] / (W - 1)
            inside = visible[c] & (frac > 0.02) & (frac < 0.98)
            outside = visible[c] & ((frac < -0.05) | (frac > 1.05))
            assert int(inside.sum()) >= 50 and int(outside.sum()) >= 3, f"camera {c}: line fractions"


def _output_grads(outs, seed: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    means2d, conics, depths, _, dirs = outs
    return [torch.randn(t.shape, generator=g, dtype=torch.float64).to(t.dtype) for t in (means2d, conics, depths, dirs)]


def _assert_same(ours: list[torch.Tensor], oracle: list[torch.Tensor], rtol: float) -> None:
    """Elementwise within rtol of the oracle, or rtol times its largest entry (gradients that cancel)."""
    for name, a, b in zip(("means", "quats", "scales"), ours, oracle):
        assert torch.isfinite(a).all() and b.abs().max() > 0, name
        err = ((a - b).abs() - rtol * b.abs()).max() / b.abs().max()
        assert err <= rtol, f"{name}: error {err.item():.2e} of the largest entry (rtol {rtol:.0e})"


@pytest.mark.parametrize("shutter", SHUTTERS)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("dtype, rtol", [(torch.float64, 1e-9), (torch.float32, 2e-5)])
def test_hand_written_backward_equals_generated_adjoint(model, shutter, dtype, rtol):
    """Three cameras of one model and shutter, 192 Gaussians placed in each; random gradients of
    every output. float64 agrees to rounding (errors up to 3e-15 of the largest entry seen; 1e-9
    asked); float32 to its own rounding (up to 1.5e-6 seen; 2e-5 asked)."""
    models, shutters = [model] * 3, [shutter] * 3
    cams = make_cameras(models, shutters, dtype)
    params = make_gaussians(cams, models, 192, seed=MODELS.index(model) * 10 + SHUTTERS.index(shutter), dtype=dtype)
    outs = project(params, cams)
    if dtype == torch.float64:
        _coverage(params, cams, models, shutters, outs[3], outs[0])
    grads = _output_grads(outs, seed=7)
    ours = projection_backward(*params, cams, SETTINGS, outs[3], *grads, generated=False)
    oracle = projection_backward(*params, cams, SETTINGS, outs[3], *grads, generated=True)
    _assert_same(ours, oracle, rtol)


def _all_visible_backwards_agree(params: list[torch.Tensor], cams, seed: int, rtol: float = 1e-9) -> None:
    """Every (camera, Gaussian) pair of ``params`` is in view, and both backwards of the projection
    agree within ``rtol`` for random output gradients."""
    outs = project(params, cams)
    assert bool((outs[3] > 0).all())
    grads = _output_grads(outs, seed=seed)
    ours = projection_backward(*params, cams, SETTINGS, outs[3], *grads, generated=False)
    oracle = projection_backward(*params, cams, SETTINGS, outs[3], *grads, generated=True)
    _assert_same(ours, oracle, rtol)


def test_near_axis_equals_generated_adjoint():
    """Gaussians within 1e-9 of the optical axis (relative to their depth) of fisheye and f-theta
    cameras take ``project_radial_angle``'s branch for the axis (s = f'(theta) / z); the backward
    follows it. (Exactly on the axis the generated adjoint is NaN, through sqrt's derivative at 0;
    the hand-written one leaves that term out.)"""
    models = ["opencv_fisheye", "ftheta"]
    start = torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    end = start.clone()
    start[:, 0, 3], end[:, 0, 3] = -0.05, 0.05  # moving; the global shutter's pose (mid-readout) is the identity
    cams = CameraBatch.create(models, [PARAMS[m] for m in models], W, H, start, end, ["global"] * 2)
    g = torch.Generator().manual_seed(5)
    means = torch.tensor([[1e-12, 0.5e-12, 3.0], [1e-11, -2e-11, 2.5], [-3e-10, 1e-10, 0.5]], dtype=torch.float64)
    quats = torch.randn(3, 4, generator=g, dtype=torch.float64)
    scales = 0.05 + 0.2 * torch.rand(3, 3, generator=g, dtype=torch.float64)
    params = [means, quats, scales, torch.full((3,), 0.9, dtype=torch.float64)]
    _all_visible_backwards_agree(params, cams, seed=6)


def test_line_time_found_from_behind_the_near_plane_equals_generated_adjoint():
    """A rolling-shutter camera that moves along its axis: a Gaussian behind the near plane at
    mid-readout (where the forward's line-time projection holds z at near) is in view at its line
    time. The line fraction's gradient then has no part through that z, in both backwards."""
    start = torch.eye(4, dtype=torch.float64)[None]
    end = start.clone()
    end[0, 2, 3] = 0.2  # the camera backs away 0.2 m along its axis during the readout
    cams = CameraBatch.create(["pinhole"], [PARAMS["pinhole"]], W, H, start, end, ["top_to_bottom"])
    means = torch.tensor([[0.0005, 0.003, -0.095], [0.1, -0.2, 2.0]], dtype=torch.float64)
    quats = torch.tensor([[0.9, 0.1, -0.3, 0.2]] * 2, dtype=torch.float64)
    scales = torch.tensor([[0.004, 0.006, 0.005]] * 2, dtype=torch.float64)
    params = [means, quats, scales, torch.full((2,), 0.9, dtype=torch.float64)]
    assert float(means[0, 2]) + 0.1 <= SETTINGS.near  # behind the near plane at mid-readout
    _all_visible_backwards_agree(params, cams, seed=8)


class _Projection(torch.autograd.Function):
    """The projection with the hand-written backward: (means, quats, scales) -> means2d, conics,
    depths, dirs (zeros where culled)."""

    @staticmethod
    def forward(ctx, means, quats, scales, opacities, cams):
        means2d, conics, depths, radii, dirs = project([means, quats, scales, opacities], cams)
        ctx.save_for_backward(means, quats, scales, opacities, radii)
        ctx.cams = cams
        return means2d, conics, depths, dirs

    @staticmethod
    def backward(ctx, g_means2d, g_conics, g_depths, g_dirs):
        means, quats, scales, opacities, radii = ctx.saved_tensors
        grads = projection_backward(means, quats, scales, opacities, ctx.cams, SETTINGS, radii, g_means2d.contiguous(),
                                    g_conics.contiguous(), g_depths.contiguous(), g_dirs.contiguous(), generated=False)
        return (*grads, None, None)


def test_gradcheck_float64_mixed_rig():
    """Finite differences of the projection through the hand-written backward: an OpenCV camera
    (rolling, top to bottom), a fisheye (left to right) and an f-theta (bottom to top), moving, and
    Gaussians well inside every one's view (no culling decision or clamp within eps of flipping),
    plus one large splat centred beyond the OpenCV camera's margin (its Jacobian clamped).
    Central differences with eps = 1e-6 are exact to ~1e-8 on these outputs (pixels, inverse pixels
    squared, metres); atol 1e-6, rtol 1e-5."""
    models = ["opencv", "opencv_fisheye", "ftheta"]
    shutters = ["top_to_bottom", "left_to_right", "bottom_to_top"]
    cams = make_cameras(models, shutters, torch.float64)
    g = torch.Generator().manual_seed(3)
    means = torch.tensor([[0.1, 0.05, 3.0], [-0.3, 0.2, 4.0], [0.25, -0.2, 2.5], [4.0, 0.1, 3.0]], dtype=torch.float64)
    means[:3] += 0.05 * torch.randn(3, 3, generator=g, dtype=torch.float64)
    quats = torch.randn(4, 4, generator=g, dtype=torch.float64)
    scales = 0.1 + 0.1 * torch.rand(4, 3, generator=g, dtype=torch.float64)
    scales[3] = torch.tensor([1.0, 0.8, 0.9], dtype=torch.float64)
    opacities = torch.full((4,), 0.9, dtype=torch.float64)
    radii = project([means, quats, scales, opacities], cams)[3]
    assert bool((radii[:, :3] > 0).all()) and int(radii[0, 3]) > 0
    hix = _view_bounds("opencv")[1]
    assert means[3, 0] / means[3, 2] > 1.1 * hix  # (the OpenCV camera is the first: it sits at the origin)

    def f(m, q, s):
        return _Projection.apply(m, q, s, opacities, cams)

    inputs = [t.clone().requires_grad_(True) for t in (means, quats, scales)]
    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-6, rtol=1e-5)


def test_renderer_routes_to_the_hand_written_backward_and_the_switch_to_the_adjoint(monkeypatch):
    """render_cameras' backward launches the hand-written kernel by default, and Warp's generated
    adjoint with ``GENERATED_PROJECTION_ADJOINT``; both give the same gradients."""
    models = ["pinhole", "opencv_fisheye", "ftheta"]
    cams = make_cameras(models, ["top_to_bottom", "left_to_right", "global"], torch.float64)
    params = make_gaussians(cams, models, 64, seed=4, dtype=torch.float64)
    params = [p.requires_grad_(True) for p in params] + [torch.rand(len(params[0]), 3, dtype=torch.float64)]
    launched = []

    def spy(kernel, *args, **kwargs):
        launched.append((kernel, kwargs.get("adjoint", False)))
        return launch(kernel, *args, **kwargs)

    monkeypatch.setattr(camera, "launch", spy)
    grads = {}
    for generated in (False, True):
        monkeypatch.setattr(camera, "GENERATED_PROJECTION_ADJOINT", generated)
        launched.clear()
        out = render_cameras(*params, cams)
        grads[generated] = torch.autograd.grad((out.rgb * out.rgb).sum() + out.depth.sum(), params[:3])
        assert ((kproj.project_gaussians_backward_f64, False) in launched) == (not generated)
        assert ((kproj.project_gaussians_f64, True) in launched) == generated
    _assert_same(list(grads[False]), list(grads[True]), 1e-10)
