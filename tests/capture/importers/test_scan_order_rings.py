"""Rings from the order a scan stores its points in (KITTI's velodyne scans: laser by laser).

Synthetic scans of a spinning lidar whose lasers sit at their own heights (as an HDL-64E's
do), stored laser by laser or in other orders; and the real KITTI drive of ../shared/data,
whose channel table must come from its lasers (skipped when the data is absent).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from conftest import shared_data_dir
from nurec_usd.capture.importers.sweep_cache import ring_columns, rings_from_scan_order

ELEVATIONS = np.linspace(2.0, -24.0, 40)  # degrees, top laser first
COLUMNS = 1000


def _scan(start_deg: float = 7.0, seed: int = 0, empty_sector: tuple[float, float] | None = None):
    """Points of a scan laser by laser, each laser's in azimuth order from ``start_deg`` round
    once; returns (points [N, 3], the laser of each point [N]). Each laser's beam starts a few
    centimetres off the sensor origin, so near points are seen off the laser's elevation."""
    rng = np.random.default_rng(seed)
    pts, laser = [], []
    for k, el in enumerate(np.radians(ELEVATIONS)):
        az = np.radians(start_deg) + 2 * math.pi * np.arange(COLUMNS) / COLUMNS
        r = rng.uniform(3.0, 60.0, COLUMNS)
        keep = rng.random(COLUMNS) > 0.1  # some rays return nothing
        if empty_sector is not None:
            deg = np.mod(np.degrees(az), 360)
            keep &= ~((deg >= empty_sector[0]) & (deg < empty_sector[1]))
        az, r = az[keep], r[keep]
        beam = np.stack([np.cos(el) * np.cos(az), np.cos(el) * np.sin(az), np.full_like(az, np.sin(el))], 1)
        origin = np.array([0.0, 0.0, 0.1 if k % 2 else -0.1])  # the laser's own origin
        pts.append(origin + r[:, None] * beam)
        laser.append(np.full(len(r), k))
    return np.concatenate(pts), np.concatenate(laser)


def test_laser_by_laser_scans_give_their_lasers():
    points, laser = _scan()
    ring = rings_from_scan_order(points)
    assert ring is not None
    np.testing.assert_array_equal(ring, laser)
    assert abs(ring_columns(points, ELEVATIONS, ring) - COLUMNS) <= 2


def test_a_laser_without_returns_on_half_the_turn_still_counts():
    points, laser = _scan(start_deg=-20.0, empty_sector=(30.0, 250.0))  # a 220 degree forward step per laser
    np.testing.assert_array_equal(rings_from_scan_order(points), laser)


def test_other_orders_are_not_taken_for_rings():
    points, _ = _scan()
    rng = np.random.default_rng(1)
    assert rings_from_scan_order(points[rng.permutation(len(points))]) is None  # shuffled (DGP's merged clouds)
    az = np.arctan2(points[:, 1], points[:, 0])
    assert rings_from_scan_order(points[np.argsort(az, kind="stable")]) is None  # column by column
    assert rings_from_scan_order(points[:50]) is None  # too few points to tell


def test_the_real_kitti_drive_gets_its_lasers_as_channels():
    data = shared_data_dir()
    drive = None if data is None else data / "kitti_udacity" / "2011_09_26"
    if drive is None or not drive.is_dir():
        pytest.skip("real test data (../shared/data/kitti_udacity or $NUREC_USD_TEST_DATA) is not available")
    from nurec_usd.capture.importers import load_any

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        capture = load_any(drive)
    lidar = capture.lidars["velodyne"]
    assert capture.metadata["lidar_models"]["velodyne"]["method"] == "scan-order rings"
    assert lidar.channels == 64  # the HDL-64E's lasers
    assert 1900 <= lidar.columns <= 2100  # its ~0.18 degree steps at 10 Hz
    sweep = lidar.load_sweep(0)
    far = np.linalg.norm(sweep.points, axis=1) > 20
    el = np.degrees(np.arctan2(sweep.points[:, 2], np.linalg.norm(sweep.points[:, :2], axis=1)))
    # each channel is one laser: its far points keep to one elevation (channels by the points'
    # elevations mixed neighbouring lasers, whose far points are 0.3 to 0.5 degrees apart)
    spreads = [np.median(np.abs(e - np.median(e))) for c in range(lidar.channels)
               if len(e := el[far & (sweep.channel == c)]) >= 10]
    assert len(spreads) >= 16 and np.median(spreads) < 0.05
    # and a laser fires once per column: few points share a (channel, column) bin of the range
    # image (the elevation quantiles' channels kept 73 % of this sweep's points, the lasers 92 %)
    az = np.degrees(np.arctan2(sweep.points[:, 1], sweep.points[:, 0]))
    column = np.round(np.mod(az - lidar.start_azimuth_deg, 360) / 360 * lidar.columns).astype(np.int64) % lidar.columns
    assert len(np.unique(sweep.channel.astype(np.int64) * lidar.columns + column)) / len(sweep) > 0.85
