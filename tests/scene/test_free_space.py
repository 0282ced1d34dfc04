"""``nurec_usd.scene.free_space``: points a lidar sweep saw through, against a slow per-point
twin and on hand-built range images whose answers are known."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nurec_usd.scene.free_space import SweepRanges, nearest_around, seen_through
from nurec_usd.sensors.lidar import SpinningLidarModel

ELEVATIONS = [5.0, -10.0, 0.0, -5.0]  # deliberately out of order: neighbours are by elevation


def _model(columns: int = 72, rotation: str = "counterclockwise") -> SpinningLidarModel:
    return SpinningLidarModel(ELEVATIONS, columns=columns, rotation=rotation, scan_rate_hz=10.0, min_range_m=0.5,
                              max_range_m=100.0, azimuth_offset_deg=[0.0, 1.0, -1.0, 0.5], start_azimuth_deg=30.0,
                              dtype=torch.float64)


def _still(ranges: torch.Tensor, model: SpinningLidarModel, at=(0.0, 0.0, 0.0)) -> SweepRanges:
    """Sweeps taken with the sensor at ``at`` (world), axes aligned with the world's."""
    s = ranges.shape[0]
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64).expand(s, 4)
    t = -torch.tensor([at], dtype=torch.float64).expand(s, 3)
    return SweepRanges(model, q, t, q, t, ranges)


def _point(az_deg: float, el_deg: float, rng: float) -> list[float]:
    az, el = math.radians(az_deg), math.radians(el_deg)
    return [rng * math.cos(el) * math.cos(az), rng * math.cos(el) * math.sin(az), rng * math.sin(el)]


def _column_azimuth(model: SpinningLidarModel, channel: int, column: int) -> float:
    return 30.0 + model.sign * 360.0 * column / model.columns + [0.0, 1.0, -1.0, 0.5][channel]


def test_a_wall_carves_what_stands_before_it_and_nothing_behind_or_outside_the_beams():
    """Every ray returns from 10 m. Nearer than 10 m less the margin (0.5 m: 5% of 10 m beats
    0.3 m): seen through; within the margin, behind the wall, or above the highest beam (5
    degrees, the next channel 5 degrees below it): not."""
    model = _model()
    sweeps = _still(torch.full((1, 4, 72), 10.0, dtype=torch.float64), model)
    az = _column_azimuth(model, 3, 7)  # channel 3 looks 5 degrees down
    pts = torch.tensor([_point(az, -5.0, 5.0), _point(az, -5.0, 9.4), _point(az, -5.0, 9.6),
                        _point(az, -5.0, 12.0), _point(az, 10.0, 5.0), _point(az, 9.0, 2.0)], dtype=torch.float64)
    assert seen_through(pts, sweeps).tolist() == [True, True, False, False, False, False]
    # a wider margin keeps the one at 9.4 m; no margin at all carves the one at 9.6 m too
    assert seen_through(pts, sweeps, margin_m=1.0).tolist() == [True, False, False, False, False, False]
    assert seen_through(pts, sweeps, margin_m=0.0, margin_fraction=0.0).tolist()[:3] == [True, True, True]


def test_rays_without_a_return_carve_nothing():
    """0 (no return) and -1 (a return left out, the ego vehicle's) are not free space."""
    model = _model()
    az = _column_azimuth(model, 2, 20)
    pts = torch.tensor([_point(az, 0.0, 3.0)], dtype=torch.float64)
    for value in (0.0, -1.0):
        ranges = torch.full((1, 4, 72), 10.0, dtype=torch.float64)
        ranges[0, 2, 20] = value
        assert not seen_through(pts, _still(ranges, model)).any()


def test_a_grazing_beam_does_not_carve_the_surface_beside_it():
    """A road seen at grazing angles: the beam 5 degrees down returns from 23 m, the one 10
    degrees down from 11 m. A road point 5.5 degrees down at 20 m is nearer than its own beam's
    return by 3 m, but not nearer than the neighbouring beam's: it stays."""
    model = _model()
    ranges = torch.full((1, 4, 72), 40.0, dtype=torch.float64)
    ranges[0, 3] = 23.0  # -5 degrees
    ranges[0, 1] = 11.0  # -10 degrees
    az = _column_azimuth(model, 3, 40)
    road = torch.tensor([_point(az, -5.5, 20.0)], dtype=torch.float64)
    assert not seen_through(road, _still(ranges, model)).any()
    ranges[0, 1] = 30.0  # with the lower beam far too, the point is in open space
    assert seen_through(road, _still(ranges, model)).all()


def test_a_moving_sensor_is_placed_where_it_was_when_the_column_fired():
    """The sensor drives 5 m along +x during the revolution. A point behind it (azimuth 180
    degrees from the start, fired half way round) is judged from 2.5 m along: 7.5 m away, behind
    a return at 7 m; from the start pose it would be 5 m away and in front of it."""
    model = SpinningLidarModel([0.0], columns=360, rotation="counterclockwise", scan_rate_hz=10.0, min_range_m=0.5,
                               max_range_m=100.0, dtype=torch.float64)
    q = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    start, end = torch.zeros(1, 3, dtype=torch.float64), torch.tensor([[-5.0, 0.0, 0.0]], dtype=torch.float64)
    ranges = torch.full((1, 1, 360), 7.0, dtype=torch.float64)
    moving = SweepRanges(model, q, start, q, end, ranges)
    behind = torch.tensor([[-5.0, 0.0, 0.0]], dtype=torch.float64)
    assert not seen_through(behind, moving).any()
    assert seen_through(behind, SweepRanges(model, q, start, q, start, ranges)).all()


def _slow_seen_through(points: np.ndarray, model: SpinningLidarModel, rot_start, trans_start, rot_end, trans_end,
                       ranges: np.ndarray, margin_m: float, margin_fraction: float) -> np.ndarray:
    """One point and one sweep at a time, in plain numpy and scalar arithmetic."""
    el_deg = np.asarray(ELEVATIONS)
    off_deg = np.asarray([0.0, 1.0, -1.0, 0.5])
    order = np.argsort(el_deg)
    columns = model.columns
    sign = model.sign

    def matrix(q):
        w, x, y, z = np.asarray(q) / np.linalg.norm(q)
        return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                         [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                         [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])

    def slerp(q0, q1, a):
        q0, q1 = np.asarray(q0) / np.linalg.norm(q0), np.asarray(q1) / np.linalg.norm(q1)
        d = float(q0 @ q1)
        if d < 0:
            q1, d = -q1, -d
        if d > 1 - 1e-12:
            return q0
        th = math.acos(d)
        return (math.sin((1 - a) * th) * q0 + math.sin(a * th) * q1) / math.sin(th)

    def ray(p):  # channel, continuous column, elevation (degrees), range
        az = math.degrees(math.atan2(p[1], p[0]))
        el = math.degrees(math.atan2(p[2], math.hypot(p[0], p[1])))
        c = int(np.argmin(np.abs(el - el_deg)))
        col = (sign * (az - off_deg[c] - 30.0) / 360.0 * columns) % columns
        return c, col, el, float(np.linalg.norm(p))

    def nearest(s, c, w):  # the ray's and its 8 neighbours' nearest return
        if ranges[s, c, w] <= 0:
            return 0.0
        k = int(np.where(order == c)[0][0])
        found = [ranges[s, order[kk], (w + dw) % columns] for kk in (k - 1, k, k + 1) if 0 <= kk < len(order)
                 for dw in (-1, 0, 1)]
        return min(v for v in found if v > 0)

    out = np.zeros(len(points), dtype=bool)
    for i, x in enumerate(points):
        for s in range(ranges.shape[0]):
            _, col, _, _ = ray(matrix(rot_start[s]) @ x + trans_start[s])
            a = col / columns
            p = matrix(slerp(rot_start[s], rot_end[s], a)) @ x + (1 - a) * trans_start[s] + a * trans_end[s]
            c, col, el, r = ray(p)
            gaps = [abs(el_deg[c] - e) for j, e in enumerate(el_deg) if j != c]
            if abs(el - el_deg[c]) > 0.5 * min(gaps):
                continue
            m = nearest(s, c, int(round(col)) % columns)
            if m > 0 and r < m - max(margin_m, margin_fraction * m):
                out[i] = True
    return out


@pytest.mark.parametrize("rotation", ["counterclockwise", "clockwise"])
def test_matches_a_slow_per_point_twin(rotation):
    """Random sweeps (turning and driving during the revolution, a third of the rays without a
    return) and random points: the same answer as the per-point twin, for a chunk smaller than
    one sweep's points and for one that takes them all."""
    gen = torch.Generator().manual_seed(3)
    model = _model(columns=48, rotation=rotation)
    s = 5
    q0 = torch.nn.functional.normalize(torch.tensor([[1.0, 0, 0, 0]]) + 0.1 * torch.randn(s, 4, generator=gen), dim=-1)
    q1 = torch.nn.functional.normalize(q0 + 0.05 * torch.randn(s, 4, generator=gen), dim=-1)
    t0 = torch.randn(s, 3, generator=gen)
    t1 = t0 + 0.5 * torch.randn(s, 3, generator=gen)
    ranges = 4 + 16 * torch.rand(s, 4, 48, generator=gen)
    ranges[torch.rand(s, 4, 48, generator=gen) < 0.33] = 0.0
    q0, q1, t0, t1, ranges = (x.double() for x in (q0, q1, t0, t1, ranges))
    pts = (torch.randn(400, 3, generator=gen) * torch.tensor([12.0, 12.0, 1.5])).double()
    want = _slow_seen_through(pts.numpy(), model, q0.numpy(), t0.numpy(), q1.numpy(), t1.numpy(), ranges.numpy(),
                              0.3, 0.05)
    sweeps = SweepRanges(model, q0, t0, q1, t1, ranges)
    assert 20 <= want.sum() <= 380  # the draw judges points both ways
    for chunk in (150, 10_000):
        assert seen_through(pts, sweeps, chunk=chunk).numpy().tolist() == want.tolist()
    # some of the sweeps, picked by ``use``, as those sweeps copied out
    use = torch.tensor([3, 0, 4])
    picked = SweepRanges(model, q0[use], t0[use], q1[use], t1[use], ranges[use])
    for chunk in (150, 10_000):
        assert torch.equal(seen_through(pts, SweepRanges(model, q0, t0, q1, t1, ranges, use=use), chunk=chunk),
                           seen_through(pts, picked, chunk=chunk))


def test_nearest_around_takes_neighbours_by_elevation_and_wraps_columns():
    """Channels neighbour by elevation, not by storage: the one stored first (5 degrees)
    neighbours only the one at 0 degrees (stored third); column 0 neighbours the last column."""
    model = _model(columns=6)
    ranges = torch.full((1, 4, 6), 20.0, dtype=torch.float64)
    ranges[0, 2, 5] = 3.0  # 0 degrees, last column
    ranges[0, 1, 0] = 0.0  # -10 degrees: no return
    ranges[0, 1, 3] = 2.0  # -10 degrees
    near = nearest_around(ranges, torch.deg2rad(model.elevation_deg))
    assert near[0, 0, 0] == 3.0 and near[0, 3, 0] == 3.0 and near[0, 2, 0] == 3.0  # over the wrap, either side
    assert near[0, 1, 0] == 0.0  # no return of its own: nothing
    assert near[0, 1, 1] == 20.0  # the missing return counts as none, not as 0 m
    assert near[0, 3, 4] == 2.0 and near[0, 1, 2] == 2.0  # -10 degrees neighbours -5 degrees and itself
    assert near[0, 0, 3] == 20.0 and near[0, 2, 3] == 20.0  # not 5 degrees (stored next to it) nor 0 degrees


def test_bad_shapes_are_refused_naming_the_field():
    model = _model()
    q, t = torch.zeros(2, 4), torch.zeros(2, 3)
    with pytest.raises(ValueError, match="trans_end has shape"):
        SweepRanges(model, q, t, q, torch.zeros(3, 3), torch.zeros(2, 4, 72))
    with pytest.raises(ValueError, match=r"ranges has shape \(2, 4, 71\)"):
        SweepRanges(model, q, t, q, t, torch.zeros(2, 4, 71))
    with pytest.raises(ValueError, match="use must be a 1-D long tensor of indices below 2"):
        SweepRanges(model, q, t, q, t, torch.zeros(2, 4, 72), use=torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="non-negative margins"):
        seen_through(torch.zeros(1, 3), SweepRanges(model, q, t, q, t, torch.zeros(2, 4, 72)), margin_m=-1)
