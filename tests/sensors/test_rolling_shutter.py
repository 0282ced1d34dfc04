import math

import pytest
import torch

from nurec_usd.sensors import (
    ROLLING_SHUTTER_DIRECTIONS,
    PoseTrajectory,
    camera_model,
    invert_transform,
    line_time_offsets,
    make_transform,
    project_rolling_shutter,
    row_times,
    transform_points,
)

W, H = 640, 480
READOUT = 0.03


def corners(dtype=torch.float64) -> torch.Tensor:
    # Centres of the top-left, top-right, bottom-left and bottom-right pixels.
    return torch.tensor([[0, 0], [W - 1, 0], [0, H - 1], [W - 1, H - 1]], dtype=dtype)


@pytest.mark.parametrize(
    "direction, expected",
    [
        ("top_to_bottom", [0, 0, READOUT, READOUT]),
        ("bottom_to_top", [READOUT, READOUT, 0, 0]),
        ("left_to_right", [0, READOUT, 0, READOUT]),
        ("right_to_left", [READOUT, 0, READOUT, 0]),
        ("global", [0, 0, 0, 0]),
    ],
)
def test_line_times_span_readout(direction, expected):
    t = line_time_offsets(W, H, direction, READOUT, corners())
    torch.testing.assert_close(t, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-15)
    # Every pixel is within [0, readout], including coordinates beyond the line centres.
    g = torch.Generator().manual_seed(0)
    uv = torch.rand(1000, 2, generator=g, dtype=torch.float64) * torch.tensor([W + 2.0, H + 2.0]) - 1.5
    t = line_time_offsets(W, H, direction, READOUT, uv)
    assert t.min() >= 0 and t.max() <= READOUT
    lines = row_times(H, W, direction, READOUT)
    assert lines.shape == ((W,) if direction in ("left_to_right", "right_to_left") else (H,))
    if direction == "global":
        assert (lines == 0).all()
    else:
        assert lines.min() == 0 and abs(float(lines.max()) - READOUT) < 1e-15
        # Consecutive lines are readout / (n - 1) apart.
        step = READOUT / (lines.shape[0] - 1)
        torch.testing.assert_close(lines.diff().abs(), torch.full((lines.shape[0] - 1,), step, dtype=torch.float64))


def test_line_time_hand_value_and_errors():
    # Row 239.5 of 480 top-to-bottom: 0.03 * 239.5 / 479 = 0.015 (mid-readout).
    t = line_time_offsets(W, H, "top_to_bottom", READOUT, torch.tensor([10.0, 239.5], dtype=torch.float64))
    assert abs(float(t) - 0.015) < 1e-15
    with pytest.raises(ValueError, match="diagonal"):
        line_time_offsets(W, H, "diagonal", READOUT, corners())
    with pytest.raises(ValueError):
        line_time_offsets(W, H, "top_to_bottom", -1.0, corners())
    assert set(ROLLING_SHUTTER_DIRECTIONS) == {"global", "top_to_bottom", "bottom_to_top", "left_to_right", "right_to_left"}


def _camera():
    return camera_model("pinhole", W, H, dict(fx=500.0, fy=500.0, cx=319.5, cy=239.5), dtype=torch.float64)


def _points(n=200, seed=0, near=5.0, far=15.0):
    # Points in the camera's view at depths [near, far].
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(n, 3, generator=g, dtype=torch.float64)
    z = near + (far - near) * p[:, 2]
    return torch.stack(((p[:, 0] - 0.5) * 1.2 * z, (p[:, 1] - 0.5) * 0.9 * z, z), dim=-1)


def _moving_trajectory(frame_time: float, velocity, yaw_rate: float) -> PoseTrajectory:
    # Constant velocity (camera frame axes, m/s) and yaw rate (about the camera's y axis, rad/s).
    times = torch.tensor([frame_time - 0.1, frame_time + 0.1], dtype=torch.float64)
    yaw = yaw_rate * 0.2
    R1 = torch.tensor([[math.cos(yaw), 0, math.sin(yaw)], [0, 1, 0], [-math.sin(yaw), 0, math.cos(yaw)]], dtype=torch.float64)
    key_T = make_transform(
        torch.stack((torch.eye(3, dtype=torch.float64), R1)),
        torch.stack((torch.zeros(3, dtype=torch.float64), 0.2 * torch.tensor(velocity, dtype=torch.float64))),
    )
    return PoseTrajectory(times, key_T)


@pytest.mark.parametrize("direction", ["top_to_bottom", "bottom_to_top", "left_to_right", "right_to_left"])
@pytest.mark.parametrize(
    "velocity, yaw_rate, iterations, near, far",
    [
        # Driving forward at 15 m/s while turning, points 15-60 m away: up to ~10 px of motion per
        # readout, so each fixed-point iteration gains ~50x (the default 2 reach ~3e-3 px).
        ((0.0, 0.0, 15.0), 0.3, 3, 15.0, 60.0),
        # 20 m/s sideways past points 5-15 m away: ~60 px (10% of the width) per readout; each
        # iteration gains ~10x, so more are needed.
        ((20.0, 0.0, 0.0), 0.5, 6, 5.0, 15.0),
    ],
)
def test_moving_camera_self_consistent(direction, velocity, yaw_rate, iterations, near, far):
    cam = _camera()
    frame_time = 1.7e9  # absolute timestamps need the float64 time path
    traj = _moving_trajectory(frame_time, velocity, yaw_rate)
    pts = _points(near=near, far=far)
    uv, valid, t = project_rolling_shutter(
        cam, traj.at, frame_time, pts, iterations=iterations, direction=direction, readout_s=READOUT
    )
    assert t.dtype == torch.float64 and uv.shape == (200, 2) and valid.shape == (200,)
    assert valid.float().mean() > 0.5
    assert ((t >= frame_time) & (t <= frame_time + READOUT)).all()
    # uv is exactly the projection with the pose at the returned times.
    uv_t, _ = cam.project(transform_points(invert_transform(traj.at(t)), pts))
    torch.testing.assert_close(uv_t, uv, rtol=0, atol=1e-9)
    # Self-consistency: projecting with the pose at the line time of the resulting pixel lands on it.
    t_line = frame_time + line_time_offsets(W, H, direction, READOUT, uv)
    uv_line, _ = cam.project(transform_points(invert_transform(traj.at(t_line)), pts))
    err = (uv_line - uv)[valid].norm(dim=-1)
    assert err.max() < 1e-3
    # The rolling shutter matters here: a projection at mid-readout is pixels off.
    t_mid = torch.tensor(frame_time + READOUT / 2, dtype=torch.float64)
    uv_mid, _ = cam.project(transform_points(invert_transform(traj.at(t_mid)), pts))
    assert (uv_mid - uv)[valid].norm(dim=-1).max() > 1.0


def test_static_camera_equals_plain_projection():
    cam = _camera()
    T = make_transform(torch.eye(3, dtype=torch.float64), torch.tensor([0.5, -0.2, 1.0], dtype=torch.float64))
    traj = PoseTrajectory(torch.tensor([0.0], dtype=torch.float64), T[None])
    pts = _points(seed=1)
    uv, valid, t = project_rolling_shutter(cam, traj.at, 2.0, pts, direction="top_to_bottom", readout_s=READOUT)
    uv_ref, valid_ref = cam.project(transform_points(invert_transform(T), pts))
    torch.testing.assert_close(uv, uv_ref, rtol=0, atol=1e-12)
    assert torch.equal(valid, valid_ref)
    # Global shutter: every point at the frame time.
    _, _, t = project_rolling_shutter(cam, traj.at, 2.0, pts, direction="global", readout_s=READOUT)
    assert (t == 2.0).all()
