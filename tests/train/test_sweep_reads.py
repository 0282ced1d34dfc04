"""Sweeps read onto the device equal the host's reading: columns, non-finite points dropped, the
returns a keep function refuses split off, firing times, and the same errors for bad sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from nurec_usd.capture import load_capture
from nurec_usd.capture.sweep_io import SweepFormatError, read_nrl, write_nrl
from nurec_usd.train.sweep_reads import checked_sweep, read_columns


def _sweep_path(root: Path, index: int) -> Path:
    return root / json.loads((root / "capture.json").read_text())["lidars"][0]["sweeps"][index]["file"]


def _rewrite(root: Path, index: int, change) -> None:
    path = _sweep_path(root, index)
    base = json.loads((root / "capture.json").read_text())["lidars"][0]["sweeps"][index]["timestamp_us"]
    s = read_nrl(path)
    pts, inten, times, ch = s.points.copy(), s.intensity.copy(), s.timestamps_us.copy(), s.channel.copy()
    change(pts, inten, times, ch)
    write_nrl(path, base, pts, inten, times, ch)


def _keep_near(lidar_id: str, points: torch.Tensor) -> torch.Tensor:  # a stand-in for the ego box
    return points.double().norm(dim=1) > 6.0


def _host_reading(capture, lidar, index: int, keep):
    """The reference: the host's checked sweep, split with numpy."""
    s = lidar.load_sweep(index)
    use = np.ones(len(s), bool) if keep is None else keep(lidar.id, torch.from_numpy(s.points)).numpy()
    return s, use, capture.seconds(s.timestamps_us[use])


@pytest.mark.parametrize("keep", [None, _keep_near], ids=["keep all", "keep far"])
def test_device_reading_equals_the_host_reading(capture_copy, keep):
    def damage(p, i, t, c):  # non-finite points (lidars write NaN for rays without a return)
        p[:7] = np.nan
        p[10, 2] = np.inf

    _rewrite(capture_copy, 1, damage)
    capture = load_capture(capture_copy)
    lidar = capture.lidars["top"]
    split_any = False
    for index in range(len(lidar.sweeps)):
        got = checked_sweep(read_columns(lidar, index, torch.device("cpu")), lidar, index, keep, capture.start_us)
        s, use, seconds = _host_reading(capture, lidar, index, keep)
        assert got.nonfinite == s.dropped_nonfinite == (8 if index == 1 else 0)
        np.testing.assert_array_equal(got.points.numpy(), s.points[use])
        np.testing.assert_array_equal(got.intensity.numpy(), s.intensity[use])
        np.testing.assert_array_equal(got.channel.numpy(), s.channel[use])
        assert got.times_s.dtype == torch.float64
        np.testing.assert_array_equal(got.times_s.numpy(), seconds)
        if use.all():
            assert got.dropped is None
        else:
            split_any = True
            for a, b in zip(got.dropped, (s.points[~use], s.intensity[~use], s.channel[~use])):
                np.testing.assert_array_equal(a.numpy(), b)
        assert got.compensated == bool(np.all(s.timestamps_us == lidar.sweeps[index].timestamp_us))
    assert split_any == (keep is not None)


def test_a_compensated_sweep_is_recognised(capture_copy):
    capture = load_capture(capture_copy)
    base = capture.lidars["top"].sweeps[0].timestamp_us
    _rewrite(capture_copy, 0, lambda p, i, t, c: t.__setitem__(slice(None), base))
    capture = load_capture(capture_copy)
    lidar = capture.lidars["top"]
    assert checked_sweep(read_columns(lidar, 0, torch.device("cpu")), lidar, 0, None, capture.start_us).compensated
    assert not checked_sweep(read_columns(lidar, 1, torch.device("cpu")), lidar, 1, None, capture.start_us).compensated


def test_a_point_cloud_sweep_is_read_on_the_host_and_split_on_the_device(capture_copy):
    o3d = pytest.importorskip("open3d")
    capture = load_capture(capture_copy)
    truth = capture.lidars["top"].load_sweep(2)
    pcd = o3d.t.geometry.PointCloud()
    pcd.point.positions = o3d.core.Tensor(truth.points)
    ply = _sweep_path(capture_copy, 2).with_suffix(".ply")
    assert o3d.t.io.write_point_cloud(str(ply), pcd)
    m = json.loads((capture_copy / "capture.json").read_text())
    m["lidars"][0]["sweeps"][2]["file"] = str(ply.relative_to(capture_copy))
    (capture_copy / "capture.json").write_text(json.dumps(m))
    capture = load_capture(capture_copy)
    lidar = capture.lidars["top"]
    middle = float(np.median(np.linalg.norm(truth.points, axis=1)))

    def keep(lidar_id: str, points: torch.Tensor) -> torch.Tensor:
        return points.double().norm(dim=1) > middle

    got = checked_sweep(read_columns(lidar, 2, torch.device("cpu")), lidar, 2, keep, capture.start_us)
    s, use, seconds = _host_reading(capture, lidar, 2, keep)
    assert 0 < use.sum() < len(use)
    np.testing.assert_array_equal(got.points.numpy(), s.points[use])
    np.testing.assert_array_equal(got.channel.numpy(), s.channel[use])
    np.testing.assert_array_equal(got.times_s.numpy(), seconds)
    assert len(got.dropped[0]) == int((~use).sum())


@pytest.mark.parametrize("damage, field", [
    (lambda p, i, t, c: c.__setitem__(3, 999), "channel"),
    (lambda p, i, t, c: i.__setitem__(5, np.nan), "intensity"),
    (lambda p, i, t, c: t.__setitem__(slice(0, 4), t[0] + 30_000_000), "time_offset_us"),
], ids=["channel", "intensity", "time"])
def test_a_bad_sweep_raises_the_hosts_error(capture_copy, damage, field):
    _rewrite(capture_copy, 1, damage)
    capture = load_capture(capture_copy)
    lidar = capture.lidars["top"]
    columns = read_columns(lidar, 1, torch.device("cpu"))
    with pytest.raises(SweepFormatError) as err:
        checked_sweep(columns, lidar, 1, None, capture.start_us)
    assert err.value.field == field and err.value.path == lidar.sweeps[1].path


def test_a_sweep_that_shrank_after_its_header_was_checked(capture_copy, monkeypatch):
    from nurec_usd.train import sweep_reads

    capture = load_capture(capture_copy)
    lidar = capture.lidars["top"]
    real = sweep_reads.read_nrl_header
    monkeypatch.setattr(sweep_reads, "read_nrl_header", lambda path: (real(path)[0] + 1, real(path)[1]))
    with pytest.raises(SweepFormatError, match="truncated") as err:
        read_columns(lidar, 0, torch.device("cpu"))
    assert err.value.field == "header.point_count"
