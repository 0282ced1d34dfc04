import math

import pytest
import torch

from nurec_usd.sensors import SpinningLidarModel

# Unsorted, non-uniform elevations (at least 1 degree apart) and non-zero azimuth offsets.
ELEVATION = [2.0, -15.0, 10.5, -1.0, -25.0, 5.0, 0.5, -7.0]
OFFSET = [1.2, -3.0, 0.0, 2.5, -0.7, 4.1, -1.9, 0.3]


def make(rotation="counterclockwise", start=0.0, offsets=OFFSET, columns=360, dtype=torch.float64):
    return SpinningLidarModel(
        ELEVATION,
        azimuth_offset_deg=offsets,
        columns=columns,
        rotation=rotation,
        scan_rate_hz=10.0,
        start_azimuth_deg=start,
        min_range_m=0.5,
        max_range_m=120.0,
        dtype=dtype,
    )


def wrapped_column_error(a: torch.Tensor, b: torch.Tensor, columns: int) -> torch.Tensor:
    d = torch.remainder(a - b, columns)
    return torch.minimum(d, columns - d)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_ray_directions_unit_and_firing_times(dtype):
    lidar = make(dtype=dtype)
    rays = lidar.ray_directions()
    assert rays.shape == (8, 360, 3) and rays.dtype == dtype
    torch.testing.assert_close(rays.norm(dim=-1), torch.ones(8, 360, dtype=dtype))
    t = lidar.firing_time_offsets()
    assert t.shape == (360,) and t[0] == 0
    assert (t.diff() > 0).all() and t[-1] < 0.1
    torch.testing.assert_close(t[-1], torch.tensor(0.1 * 359 / 360, dtype=torch.float64))


def test_hand_values():
    # Column 90 of 360, counterclockwise from start 0 deg, channel 2 (elevation 10.5, offset 0):
    # azimuth 90 deg -> direction (0, cos 10.5, sin 10.5), fired at 90 / (360 * 10) = 0.025 s.
    lidar = make()
    d = lidar.ray_directions()[2, 90]
    e = math.radians(10.5)
    torch.testing.assert_close(d, torch.tensor([0.0, math.cos(e), math.sin(e)], dtype=torch.float64))
    assert abs(float(lidar.firing_time_offsets()[90]) - 0.025) < 1e-15
    az, el, rng = lidar.spherical(torch.tensor([[-1.0, 0.0, 0.0], [-1.0, -0.0, 0.0], [0.0, 3.0, 4.0]], dtype=torch.float64))
    assert az[0] == math.pi and az[1] == math.pi  # wrapped to (-pi, pi]
    assert abs(float(el[2]) - math.atan2(4, 3)) < 1e-15 and float(rng[2]) == 5.0


def test_rotation_order():
    ccw = make("counterclockwise", offsets=None).ray_directions()[0]
    cw = make("clockwise", offsets=None).ray_directions()[0]
    az_ccw = torch.atan2(ccw[:, 1], ccw[:, 0])
    az_cw = torch.atan2(cw[:, 1], cw[:, 0])
    # Counterclockwise: column 1 is +1 deg (toward +y); clockwise: -1 deg.
    assert abs(math.degrees(float(az_ccw[1])) - 1.0) < 1e-9
    assert abs(math.degrees(float(az_cw[1])) + 1.0) < 1e-9
    # A point at +10 deg azimuth is hit early by the ccw sweep and late by the cw sweep.
    p = torch.tensor([math.cos(math.radians(10)), math.sin(math.radians(10)), math.sin(math.radians(2.0))], dtype=torch.float64)
    lidar_ccw, lidar_cw = make("counterclockwise", offsets=None), make("clockwise", offsets=None)
    assert abs(float(lidar_ccw.time_offset_of_points(p)) - 10 / 3600) < 1e-12
    assert abs(float(lidar_cw.time_offset_of_points(p)) - 350 / 3600) < 1e-12


@pytest.mark.parametrize("rotation", ["counterclockwise", "clockwise"])
@pytest.mark.parametrize("start", [0.0, 180.0, -93.7])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_channel_and_column_recovered(rotation, start, dtype):
    lidar = make(rotation, start, columns=1024, dtype=dtype)
    rays = lidar.ray_directions()  # [C, columns, 3]
    g = torch.Generator().manual_seed(0)
    ranges = (1 + 100 * torch.rand(8, 1024, 1, generator=g, dtype=torch.float64)).to(dtype)
    points = rays * ranges
    channel, column = lidar.channel_and_column(points)
    assert channel.dtype == torch.long and column.dtype == dtype
    assert torch.equal(channel, torch.arange(8)[:, None].expand(8, 1024))
    assert (column >= 0).all() and (column < 1024).all()
    expected = torch.arange(1024, dtype=dtype).expand(8, 1024)
    tol = 1e-3 if dtype == torch.float32 else 1e-8
    assert wrapped_column_error(column, expected, 1024).max() < tol
    # Firing times of the nearest columns.
    t = lidar.time_offset_of_points(points)
    torch.testing.assert_close(t, lidar.firing_time_offsets().expand(8, 1024), rtol=0, atol=1e-12)
    # The +-180 deg seam really is crossed by some channel's rays with these offsets/start.
    az, _, _ = lidar.spherical(points)
    assert (az.abs() > math.pi - 0.01).any()


def test_column_near_seam_and_between_columns():
    lidar = make(start=180.0, offsets=None, columns=360)
    # Column 0 points at 180 deg and the sweep turns counterclockwise: an azimuth just below
    # +180 deg is just before column 0 (column ~359.9999), one just above -180 deg just after it.
    eps = 1e-6
    pts = torch.tensor(
        [[-1.0, eps, 0.035], [-1.0, -eps, 0.035], [math.cos(math.radians(180.5)), math.sin(math.radians(180.5)), 0.035]],
        dtype=torch.float64,
    )
    _, column = lidar.channel_and_column(pts)
    assert 360 - 1e-3 < float(column[0]) < 360
    assert float(column[1]) < 1e-3
    assert abs(float(column[2]) - 0.5) < 1e-9
    # Column 359.9996 is nearest to column 0 (wrapping), so it fires at the sweep start.
    assert float(lidar.time_offset_of_points(pts[0])) == 0.0


def test_invalid_constructor_inputs():
    base = dict(columns=10, rotation="clockwise", scan_rate_hz=10.0, min_range_m=0.0, max_range_m=10.0)
    SpinningLidarModel([0.0], **base)
    cases = [
        (dict(), "elevation_deg", []),
        (dict(azimuth_offset_deg=[0.0, 1.0]), "azimuth_offset_deg", [0.0]),
        (dict(columns=0), "columns", [0.0]),
        (dict(columns=2.5), "columns", [0.0]),
        (dict(rotation="up"), "rotation", [0.0]),
        (dict(scan_rate_hz=0.0), "scan_rate_hz", [0.0]),
        (dict(min_range_m=-1.0), "min_range_m", [0.0]),
        (dict(min_range_m=10.0), "max_range_m", [0.0]),
        (dict(), "elevation_deg", [95.0]),
        (dict(start_azimuth_deg=float("nan")), "start_azimuth_deg", [0.0]),
    ]
    for override, field, elevation in cases:
        with pytest.raises(ValueError, match=field):
            SpinningLidarModel(elevation, **{**base, **override})


def test_spherical_gradients_finite_at_origin_and_on_axis():
    p = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, 2.0], [1.0, 2.0, 3.0]], dtype=torch.float64, requires_grad=True)
    az, el, rng = SpinningLidarModel.spherical(p)
    (g,) = torch.autograd.grad(el.sum() + rng.sum(), p)
    assert torch.isfinite(g).all()
    assert float(rng[0].detach()) == 0.0 and abs(float(el[1].detach()) - math.pi / 2) < 1e-15
