"""Sweep files: the .nrl binary format, and .ply/.pcd through open3d."""

from __future__ import annotations

import numpy as np
import pytest

from nurec_usd.capture import load_capture
from nurec_usd.capture.sweep_io import SweepFormatError, read_nrl, read_nrl_header, read_sweep, write_nrl


def _random_sweep(n=500, seed=0):
    rng = np.random.default_rng(seed)
    points = rng.normal(size=(n, 3)).astype(np.float32) * 10
    intensity = rng.uniform(size=n).astype(np.float32)
    times = 1_000_000 + rng.integers(0, 100_000, size=n)
    channel = rng.integers(0, 64, size=n)
    return points, intensity, times, channel


def test_nrl_round_trip(tmp_path):
    points, intensity, times, channel = _random_sweep()
    path = tmp_path / "s.nrl"
    write_nrl(path, 1_000_000, points, intensity, times, channel)
    assert path.stat().st_size == 32 + 22 * len(points)
    assert read_nrl_header(path) == (len(points), 1_000_000)
    sweep = read_nrl(path)
    np.testing.assert_array_equal(sweep.points, points)
    np.testing.assert_array_equal(sweep.intensity, intensity)
    np.testing.assert_array_equal(sweep.timestamps_us, times)
    np.testing.assert_array_equal(sweep.channel, channel)


@pytest.mark.parametrize("damage, field", [
    (lambda b: b[:20], "header"),
    (lambda b: b"XXXXXXXX" + b[8:], "header.magic"),
    (lambda b: b[:8] + (7).to_bytes(4, "little") + b[12:], "header.version"),
    (lambda b: b[:-1], "header.point_count"),
    (lambda b: b + b"\0", "header.point_count"),
])
def test_nrl_damage_names_the_field(tmp_path, damage, field):
    path = tmp_path / "s.nrl"
    write_nrl(path, 1_000_000, *_random_sweep(10))
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(SweepFormatError) as err:
        read_nrl(path)
    assert err.value.field == field


def test_write_refuses_mismatched_lengths(tmp_path):
    points, intensity, times, channel = _random_sweep(10)
    with pytest.raises(ValueError, match="disagree"):
        write_nrl(tmp_path / "s.nrl", 0, points, intensity[:5], times, channel)


@pytest.mark.parametrize("suffix", [".pcd", ".ply"])
def test_point_cloud_sweeps_through_open3d(handmade_capture, tmp_path, suffix):
    """A .pcd/.ply sweep with only positions gets channels and firing times from the lidar model,
    matching what the .nrl sweep of the same points says."""
    o3d = pytest.importorskip("open3d")
    cap = load_capture(handmade_capture)
    lidar = cap.lidars["top"]
    truth = lidar.load_sweep(2)
    pcd = o3d.t.geometry.PointCloud()
    pcd.point.positions = o3d.core.Tensor(truth.points)
    path = tmp_path / f"sweep{suffix}"
    assert o3d.t.io.write_point_cloud(str(path), pcd)
    sweep = read_sweep(path, lidar.sweeps[2].timestamp_us, lidar)
    np.testing.assert_allclose(sweep.points, truth.points, atol=1e-5)
    assert np.mean(sweep.channel == truth.channel) > 0.999
    # firing time of the column each point falls in: within one column period of the truth
    column_us = 1e6 / (lidar.columns * lidar.scan_rate_hz)
    assert np.abs(sweep.timestamps_us - truth.timestamps_us).max() <= column_us + 1


def test_point_cloud_attributes_are_used_when_present(tmp_path):
    o3d = pytest.importorskip("open3d")
    points, intensity, times, channel = _random_sweep(50)
    pcd = o3d.t.geometry.PointCloud()
    pcd.point.positions = o3d.core.Tensor(points)
    pcd.point.intensity = o3d.core.Tensor(intensity[:, None])
    pcd.point.time_offset_us = o3d.core.Tensor((times - 1_000_000).astype(np.int32)[:, None])
    pcd.point.channel = o3d.core.Tensor(channel.astype(np.int32)[:, None])
    path = tmp_path / "s.pcd"
    assert o3d.t.io.write_point_cloud(str(path), pcd)
    sweep = read_sweep(path, 1_000_000, None)
    np.testing.assert_allclose(sweep.intensity, intensity)
    np.testing.assert_array_equal(sweep.timestamps_us, times)
    np.testing.assert_array_equal(sweep.channel, channel)


def test_unknown_sweep_suffix(tmp_path):
    path = tmp_path / "s.xyz"
    path.write_text("1 2 3\n")
    with pytest.raises(SweepFormatError, match="unknown sweep file type"):
        read_sweep(path, 0)
