"""Loading the hand-made capture: every field arrives typed, re-centred and lazily loadable."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from nurec_usd.capture import CaptureError, CaptureWriter, load_capture
import handmade


def test_loads_every_sensor_and_track(handmade_capture):
    cap = load_capture(handmade_capture)
    assert list(cap.cameras) == [c[0] for c in handmade.CAMERAS]
    assert {c.model for c in cap.cameras.values()} == {"pinhole", "opencv", "opencv_fisheye", "ftheta"}
    assert list(cap.lidars) == ["top"]
    assert list(cap.tracks) == ["car_1", "car_2"]
    assert cap.start_us == handmade.T0_US
    assert cap.duration_s == pytest.approx((handmade.N_RIG - 1) * handmade.DT_US * 1e-6)
    for cam in cap.cameras.values():
        assert len(cam.frames) == handmade.N_FRAMES
        assert np.all(np.diff(cam.timestamps_us) > 0)
    cam = cap.cameras["front_wide"]
    assert cam.rolling_shutter.direction == "top_to_bottom"
    assert cam.rolling_shutter.readout_time_s == pytest.approx(0.02)
    assert cam.intrinsics["k1"] == pytest.approx(-0.12)
    assert cap.cameras["rear_ftheta"].intrinsics["angle_to_pixel"] == [0.0, 48.0, 0.0, -1.5]


def test_world_is_recentred_on_the_first_rig_pose(handmade_capture):
    cap = load_capture(handmade_capture)
    np.testing.assert_allclose(cap.rig.T_world_rig[0, :3, 3], 0.0, atol=1e-12)
    np.testing.assert_allclose(cap.world_offset_m, handmade.WORLD_OFFSET)
    # tracks move with the same offset: their positions relative to the rig are unchanged
    _, raw_track = handmade.track_poses(handmade.TRACKS[0])
    np.testing.assert_allclose(cap.tracks["car_1"].T_world_box[:, :3, 3] + handmade.WORLD_OFFSET,
                               raw_track[:, :3, 3], atol=1e-9)
    assert cap.seconds(cap.start_us + 250_000) == pytest.approx(0.25)


def test_images_and_sweeps_load_on_demand(handmade_capture):
    cap = load_capture(handmade_capture)
    frame = cap.cameras["front"].frames[2]
    rgb = frame.load_image()
    assert rgb.shape == (handmade.HEIGHT, handmade.WIDTH, 3) and rgb.dtype == np.uint8
    assert rgb.std() > 10, "the image should show the textured scene, not a flat colour"
    assert frame.load_mask() is None
    lidar = cap.lidars["top"]
    sweep = lidar.load_sweep(1)
    assert len(sweep) > 1000
    assert sweep.points.dtype == np.float32 and sweep.points.shape[1] == 3
    assert sweep.channel.min() >= 0 and sweep.channel.max() < lidar.channels
    start = lidar.sweeps[1].timestamp_us
    assert start <= sweep.timestamps_us.min() and sweep.timestamps_us.max() < start + lidar.sweep_duration_us
    r = np.linalg.norm(sweep.points, axis=1)
    assert r.min() >= lidar.min_range_m - 1e-4 and r.max() <= lidar.max_range_m + 1e-4


def test_masks_round_trip(tmp_path):
    mask = np.zeros((4, 6), bool)
    mask[1:3, 2:5] = True
    with CaptureWriter(tmp_path / "c") as w:
        w.set_rig([0, 100], np.stack([np.eye(4)] * 2))
        w.add_camera("cam", "pinhole", 6, 4, {"fx": 5, "fy": 5, "cx": 2.5, "cy": 1.5}, np.eye(4))
        w.add_frame("cam", 0, np.zeros((4, 6, 3), np.uint8), mask=mask)
    cap = load_capture(tmp_path / "c")
    np.testing.assert_array_equal(cap.cameras["cam"].frames[0].load_mask(), mask)


def test_manifest_path_is_accepted_too(handmade_capture):
    cap = load_capture(handmade_capture / "capture.json")
    assert cap.root == handmade_capture


def test_writer_is_deterministic(tmp_path):
    a = handmade.write_handmade_capture(tmp_path / "a")
    b = handmade.write_handmade_capture(tmp_path / "b")
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert (a / rel).read_bytes() == (b / rel).read_bytes(), rel


def test_writer_leaves_nothing_behind_on_failure(tmp_path):
    out = tmp_path / "c"
    with pytest.raises(RuntimeError):
        with CaptureWriter(out) as w:
            w.set_rig([0, 100], np.stack([np.eye(4)] * 2))
            w.add_camera("cam", "pinhole", 6, 4, {"fx": 5, "fy": 5, "cx": 2.5, "cy": 1.5}, np.eye(4))
            w.add_frame("cam", 0, np.zeros((4, 6, 3), np.uint8))
            raise RuntimeError("interrupted")
    assert os.listdir(tmp_path) == []


def test_writer_refuses_an_invalid_capture_and_leaves_nothing(tmp_path):
    out = tmp_path / "c"
    with pytest.raises(CaptureError, match="outside the rig poses' range"):
        with CaptureWriter(out) as w:
            w.set_rig([0, 100], np.stack([np.eye(4)] * 2))
            w.add_camera("cam", "pinhole", 6, 4, {"fx": 5, "fy": 5, "cx": 2.5, "cy": 1.5}, np.eye(4))
            w.add_frame("cam", 500, np.zeros((4, 6, 3), np.uint8))
    assert os.listdir(tmp_path) == []


def test_writer_does_not_overwrite_by_default(tmp_path):
    (tmp_path / "c").mkdir()
    with pytest.raises(FileExistsError):
        CaptureWriter(tmp_path / "c")


def test_manifest_written_is_plain_json(handmade_capture):
    m = json.loads((handmade_capture / "capture.json").read_text())
    assert m["format"] == "nurec_usd.capture" and m["version"] == 1
    assert all(isinstance(t, int) for t in m["rig"]["timestamps_us"])
