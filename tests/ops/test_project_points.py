"""``project_points``: world points placed in cameras by the renderer's projection kernel, against
its torch twin (``project_gaussians_reference``: the sensor models' own projection, a rolling
shutter's pose at the point's line), for every camera model and shutter."""

from __future__ import annotations

import pytest
import torch

from nurec_usd.ops.camera import CameraBatch, project_points
from nurec_usd.ops.reference import _camera_pose, project_gaussians_reference
from nurec_usd.sensors.se3 import make_transform
from tests.ops.test_projection_backward import MODELS, SHUTTERS, H, W, make_cameras


def _points(n: int, dtype) -> torch.Tensor:  # [N, 3] in front of and around the test cameras
    gen = torch.Generator().manual_seed(3)
    p = torch.randn(n, 3, generator=gen, dtype=torch.float64) * torch.tensor([2.0, 1.5, 1.0], dtype=torch.float64)
    p[:, 2] += 3.0
    return p.to(dtype)


def _twin(points: torch.Tensor, cams: CameraBatch, near: float = 0.01, far: float = 1e4):
    n = points.shape[0]
    quats = torch.zeros(n, 4, dtype=points.dtype)
    quats[:, 0] = 1
    scales = torch.full((n, 3), 1e-6, dtype=points.dtype)
    colours = torch.zeros(n, 1, 3, dtype=points.dtype)
    uv, _, depth, radii, _ = project_gaussians_reference(points, quats, scales, colours, -1,
                                                         torch.ones(n, dtype=points.dtype), cams, near, far)
    inside = (radii > 0) & (uv[..., 0] >= -0.5) & (uv[..., 0] < W - 0.5) & (uv[..., 1] >= -0.5) & \
        (uv[..., 1] < H - 0.5)
    return uv, depth, inside


@pytest.mark.parametrize("shutter", SHUTTERS)
def test_every_model_matches_the_twin(shutter):
    points = _points(400, torch.float64)
    cams = make_cameras(MODELS, [shutter] * len(MODELS), torch.float64)
    uv, depth, inside = project_points(points, cams)
    t_uv, t_depth, t_inside = _twin(points, cams)
    # a point within rounding of the image's edge may fall on either side: none does here
    assert torch.equal(inside, t_inside)
    assert int(inside.sum()) > 100  # the test sees points in every camera
    for c in range(len(MODELS)):
        assert int(inside[c].sum()) > 10, MODELS[c]
    assert torch.allclose(uv[inside], t_uv[inside], atol=1e-9, rtol=0)
    assert torch.allclose(depth[inside], t_depth[inside], atol=1e-9, rtol=0)
    assert (uv[~inside] == 0).all() and (depth[~inside] == 0).all()


def test_float32_and_the_depth_convention():
    """float32 within a thousandth of a pixel of float64; the pinhole's depth is z, the fisheye's
    the distance (the renderer's depth image uses the same)."""
    points = _points(300, torch.float64)
    cams = make_cameras(["pinhole", "opencv_fisheye"], ["global", "global"], torch.float64)
    uv, depth, inside = project_points(points, cams)
    uv32, depth32, inside32 = project_points(points.float(), cams.to(torch.float32))
    both = inside & inside32
    assert int(both.sum()) >= int(inside.sum()) - 2
    assert (uv32.double()[both] - uv[both]).abs().max() < 1e-3
    # the pose at the readout's middle (a global shutter's, as the kernel takes it)
    for c, wide in ((0, False), (1, True)):
        R, t = _camera_pose(cams, c, torch.tensor(0.5, dtype=torch.float64))
        p = points[inside[c]] @ R.T + t
        expected = p.norm(dim=-1) if wide else p[:, 2]
        assert torch.allclose(depth[c][inside[c]], expected, atol=1e-9, rtol=0)


def test_points_behind_or_beyond_far_are_not_inside():
    T = make_transform(torch.eye(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64))[None]
    cams = CameraBatch.create(["pinhole"], [{"fx": 30.0, "fy": 30.0, "cx": 19.5, "cy": 14.5}], W, H, T)
    points = torch.tensor([[0.0, 0.0, 5.0], [0.0, 0.0, -5.0], [0.0, 0.0, 50.0], [100.0, 0.0, 1.0]],
                          dtype=torch.float64)
    uv, depth, inside = project_points(points, cams, far=20.0)
    assert inside.tolist() == [[True, False, False, False]]
    assert torch.allclose(uv[0, 0], torch.tensor([19.5, 14.5], dtype=torch.float64))
    assert float(depth[0, 0]) == pytest.approx(5.0)


def test_bad_shape_is_refused():
    cams = make_cameras(["pinhole"], ["global"], torch.float64)
    with pytest.raises(ValueError, match=r"points must have shape \(N, 3\)"):
        project_points(torch.zeros(4, 2, dtype=torch.float64), cams)
