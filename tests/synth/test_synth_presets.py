"""Preset definitions and traffic planning of the synthetic generator (nothing is rendered here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from nurec_usd.capture import CAMERA_MODELS
from nurec_usd.sensors import camera_model
from nurec_usd.synth import PRESETS, get_preset


def test_every_camera_model_appears_across_presets():
    models = {c.model for p in PRESETS.values() for c in p.cameras}
    assert models == set(CAMERA_MODELS), models
    assert {c.model for c in PRESETS["drive30"].cameras} == set(CAMERA_MODELS)


def test_preset_intrinsics_build_valid_camera_models():
    for p in PRESETS.values():
        for c in p.cameras:
            cm = camera_model(c.model, c.width, c.height, c.intrinsics, dtype=torch.float64)
            # the principal ray projects back onto the image
            uv, valid = cm.project(torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64))
            assert bool(valid[0]), (p.name, c.id)


def test_tiny_is_ci_sized():
    p = get_preset("tiny")
    assert 3 <= len(p.cameras) <= 5
    assert all((c.width, c.height) == (320, 180) for c in p.cameras)
    assert 8 <= p.frames <= 12
    assert p.image_format == "png"
    assert len(p.roles) == 2


def test_drive30_matches_the_issue():
    p = get_preset("drive30")
    assert p.frames == 300 and p.rate_hz == 10.0 and p.duration_s == 30.0
    assert len(p.cameras) == 6 and all((c.width, c.height) == (1280, 720) for c in p.cameras)
    assert any(c.model in ("opencv_fisheye", "ftheta") for c in p.cameras), "needs a wide-angle camera"
    # rolling shutter on most cameras
    assert sum(c.shutter != "global" for c in p.cameras) >= 4
    assert (p.lidar.channels, p.lidar.columns) == (128, 2048)
    assert len(p.roles) >= 8


def test_lidar_elevations_are_denser_near_the_horizon():
    lid = get_preset("drive30").lidar
    e = np.array(lid.elevations_deg())
    assert len(e) == 128 and np.all(np.diff(e) > 0)
    assert e.min() == pytest.approx(lid.elevation_min_deg) and e.max() == pytest.approx(lid.elevation_max_deg)
    gaps = np.diff(e)
    near = np.abs(0.5 * (e[1:] + e[:-1]) - lid.dense_elevation_deg) < 2.0
    assert gaps[near].max() < 0.5 * gaps.max()


def test_unknown_preset_lists_known_ones():
    with pytest.raises(ValueError, match="tiny"):
        get_preset("huge")


def test_drive30_traffic_plan_without_rendering():
    """drive30's actors: enough of them, one appears and one leaves mid-capture, nobody collides."""
    from nurec_usd.synth.traffic import EgoDrive, find_collision, plan_traffic

    p = get_preset("drive30")
    ego, sx, actors = plan_traffic(p, np.random.Generator(np.random.PCG64(0)))
    assert isinstance(ego, EgoDrive)
    assert len(actors) >= 8
    assert sum(a.label in ("car", "truck") for a in actors) >= 8
    assert any(a.t_start > 1.0 for a in actors), "an actor must appear mid-capture"
    assert any(a.t_end < p.duration_s - 1.0 for a in actors), "an actor must leave mid-capture"
    assert ego.s[0] < sx < ego.s[-1], "the ego drives through the crossing"
    keys = np.arange(int(p.duration_s * p.key_rate_hz) + 1) / p.key_rate_hz
    assert find_collision(ego, actors, keys) is None
    # the ego changes speed (curves come from the road)
    assert ego.v.max() - ego.v.min() > 4.0


def test_actor_meshes_stay_inside_their_boxes():
    from nurec_usd.synth.materials import MaterialTable
    from nurec_usd.synth.vehicles import CAR_SIZES, PEDESTRIAN_SIZE, TRUCK_SIZES, car_mesh, pedestrian_mesh, truck_mesh

    rng = np.random.default_rng(0)
    mats = MaterialTable()
    for size in CAR_SIZES:
        v = car_mesh(size, mats, rng).build()[0]
        assert np.all(np.abs(v) <= np.array(size) / 2 + 1e-5)
    for size in TRUCK_SIZES:
        v = truck_mesh(size, mats, rng).build()[0]
        assert np.all(np.abs(v) <= np.array(size) / 2 + 1e-5)
    v = pedestrian_mesh(PEDESTRIAN_SIZE, mats, rng).build()[0]
    assert np.all(np.abs(v) <= np.array(PEDESTRIAN_SIZE) / 2 + 1e-5)


def test_scene_build_is_deterministic():
    from nurec_usd.synth.scene import build_scene

    a = build_scene(get_preset("tiny"), seed=3)
    b = build_scene(get_preset("tiny"), seed=3)
    c = build_scene(get_preset("tiny"), seed=4)
    assert np.array_equal(a.static_vertices, b.static_vertices)
    assert np.array_equal(a.rig_poses, b.rig_poses)
    assert not np.array_equal(a.static_vertices, c.static_vertices) or not np.array_equal(a.rig_poses, c.rig_poses)
    # the ego starts at the world origin, heading +x
    np.testing.assert_array_equal(a.rig_poses[0], np.eye(4))


def test_poses_to_wp_converts_quaternions_to_warp_order():
    from nurec_usd.synth.raycast import poses_to_wp

    yaw = 0.7
    T = np.eye(4)
    T[:2, :2] = [[np.cos(yaw), -np.sin(yaw)], [np.sin(yaw), np.cos(yaw)]]
    T[:3, 3] = [1.0, 2.0, 3.0]
    out = poses_to_wp(T[None])[0]
    np.testing.assert_allclose(out[:3], [1.0, 2.0, 3.0])
    # (x, y, z, w): a yaw is a rotation about z
    np.testing.assert_allclose(out[3:], [0.0, 0.0, np.sin(yaw / 2), np.cos(yaw / 2)], atol=1e-7)


def test_kernels_compile_for_cuda():
    """The Warp module also compiles for the GPU (sm_90, via NVRTC; no GPU needed)."""
    import warp as wp

    wp.config.log_level = 30
    wp.init()
    from warp_kernels import synth_raycast

    try:
        paths = wp.compile_aot_module(synth_raycast, arch=90)
    except Exception as exc:  # pragma: no cover - environments without NVRTC
        if "NVRTC" in str(exc) or "nvrtc" in str(exc):
            pytest.skip(f"no NVRTC here: {exc}")
        raise
    assert paths
