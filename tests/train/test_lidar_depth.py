"""Depth supervision from the lidar (``nurec_usd.train.lidar_depth``): the targets of the
hand-made capture against its closed-form geometry, the loss, and the term in a build."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from handmade import CAMERAS, _Scene, _transform

from nurec_usd import build
from nurec_usd.capture.importers import load_any
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.sensors.rolling_shutter import line_time_offsets
from nurec_usd.train.data import CaptureData
from nurec_usd.train.lidar_depth import LidarDepthTargets, depth_loss

WIDE = {"opencv_fisheye", "ftheta"}


@pytest.fixture(scope="module")
def targets(handmade_capture):
    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu", eval_every=4)
    groups = data.groups(data.train_frames)
    return data, groups, LidarDepthTargets(data, groups, points_per_frame=5000, seed=1)


def _true_depths(data, ref, pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The analytic scene's depth at these pixels' centres of the frame (the renderer's depth
    convention) and whether the pixel sees a tracked actor."""
    scene = _Scene()
    cam_id = data.cameras[ref.camera].id
    cid, model, intr, R, pos, shutter, readout_us = next(c for c in CAMERAS if c[0] == cam_id)
    w = data.cameras[ref.camera].width
    uv = torch.stack([pixels % w, pixels // w], -1).double()
    cm = camera_model(model, w, data.cameras[ref.camera].height, intr, dtype=torch.float64)
    rays = cm.unproject(uv)  # [P, 3] unit, camera frame
    t = ref.time_s + line_time_offsets(w, data.cameras[ref.camera].height, shutter, readout_us * 1e-6, uv)
    T_world_cam = scene.rig_at(t) @ torch.from_numpy(_transform(R, pos))
    dirs = torch.einsum("mij,mj->mi", T_world_cam[:, :3, :3], rays)
    distance, _, _, actor = scene.cast(T_world_cam[:, :3, 3], dirs, t)
    depth = distance if model in WIDE else distance * rays[:, 2]
    return depth, actor >= 0


def test_targets_lie_on_the_surfaces_each_frame_sees(targets):
    """Every training frame gets targets; they are the surface the pixel sees, not what the lidar
    saw behind it from its own position: all within 10% of the closed-form depth, the median
    within 1% (a target sits at its pixel's centre, not at the return's exact spot, and a return
    beside an actor's silhouette may round onto it: a few per frame, at a similar depth)."""
    data, groups, t = targets
    assert set(t.frames) == {ref for g in groups for ref in g.frames}
    rel_all = []
    for ref, target in t.frames.items():
        assert target.depths.numel() > 50, data.cameras[ref.camera].id
        truth, on_actor = _true_depths(data, ref, target.pixels)
        rel_all.append((target.depths.double() - truth).abs() / truth)
        assert int(on_actor.sum()) <= 5
    rel = torch.cat(rel_all)
    assert float(rel.median()) < 0.01
    assert float(rel.quantile(0.95)) < 0.04
    assert float(rel.max()) < 0.1


def test_without_the_visibility_test_some_targets_would_be_hidden(targets, monkeypatch):
    """The visibility test matters on this street: with it off (any ratio passes), targets the
    camera cannot see appear (the check above would fail)."""
    data, groups, _ = targets
    import nurec_usd.train.lidar_depth as ld

    monkeypatch.setattr(ld, "VISIBLE_RATIO", 1e9)
    loose = LidarDepthTargets(data, groups, points_per_frame=5000, seed=1)
    worst = max(float(((tg.depths.double() - _true_depths(data, ref, tg.pixels)[0]).abs()
                       / _true_depths(data, ref, tg.pixels)[0]).max()) for ref, tg in loose.frames.items())
    assert worst > 0.2


def test_gathered_indices_address_the_group_render_at_each_level(targets):
    data, groups, t = targets
    group = groups[0]
    for level in (1, 2):
        flat, depths = t.gathered(group, level)
        assert t.gathered(group, level)[0] is flat  # built once
        c = len(group.frames)
        cams = [data.cameras[r.camera] for r in group.frames]
        h, w = cams[0].height // level, cams[0].width // level
        assert int(flat.max()) < c * h * w
        expected = []
        for k, ref in enumerate(group.frames):
            p = t.frames[ref].pixels
            x, y = (p % cams[k].width) // level, (p // cams[k].width) // level
            expected.append((k * h + y) * w + x)
        assert torch.equal(flat, torch.cat(expected))
        assert torch.equal(depths, torch.cat([t.frames[r].depths for r in group.frames]))


def test_points_per_frame_caps_each_frame(targets):
    data, groups, _ = targets
    few = LidarDepthTargets(data, groups[:1], points_per_frame=40, seed=1)
    assert all(f.depths.numel() == 40 for f in few.frames.values())


def test_depth_loss_value_and_gradient():
    depth_sum = torch.tensor([[[2.0, 4.0], [0.5, 10.0]]], requires_grad=True)  # [1, 2, 2]
    flat = torch.tensor([0, 1, 2])
    target = torch.tensor([2.5, 4.0, 0.25])
    loss = depth_loss(depth_sum, flat, target)
    # |2 - 2.5| / 2.5, 0, |0.5 - 0.25| / 1 (relative to at least 1 m), averaged
    assert float(loss.detach()) == pytest.approx((0.2 + 0.0 + 0.25) / 3)
    loss.backward()
    assert torch.allclose(depth_sum.grad, torch.tensor([[[-1 / 2.5 / 3, 0.0], [1 / 3, 0.0]]]))
    empty = depth_loss(depth_sum, flat[:0], target[:0])
    assert float(empty) == 0.0


def test_a_build_with_the_depth_term_and_a_scale_cap(handmade_capture, tmp_path):
    """The options reach the step: the build reports its targets, and no Gaussian of the scene
    it trained is larger than the cap."""
    messages = []
    result = build(handmade_capture, tmp_path / "run", steps=4, device="cpu", progress=False, eval_every=4,
                   depth_weight=0.5, max_scale_m=0.3, log=messages.append)
    assert result.status == "completed"
    assert any(m.startswith("lidar depth targets: ") for m in messages), messages
    scene = torch.load(tmp_path / "run" / "scene.pt", weights_only=False)
    log_scales = np.concatenate([np.asarray(scene["static"]["log_scales"]), np.asarray(scene["actors"]["log_scales"])])
    assert log_scales.max() <= np.log(0.3) + 1e-6
