"""Training data preparation: downscaled intrinsics, frames laid out per camera, targets."""

from __future__ import annotations

import pytest
import torch

from conftest import REPO
from nurec_usd.capture import load_capture
from nurec_usd.sensors.cameras import camera_model
from nurec_usd.render.views import downscaled_intrinsics


@pytest.mark.parametrize("k", [2, 3])
def test_downscaled_cameras_project_to_the_shrunk_pixel_grid(k):
    capture = load_capture(REPO / "samples" / "tiny")
    pts = torch.tensor([[0.3, -0.2, 4.0], [-1.0, 0.5, 9.0], [0.05, 0.1, 2.0]], dtype=torch.float64)
    for cam in capture.cameras.values():  # one camera of each model
        full = camera_model(cam.model, cam.width, cam.height, cam.intrinsics, dtype=torch.float64)
        small = camera_model(cam.model, cam.width // k, cam.height // k,
                             downscaled_intrinsics(cam.model, cam.intrinsics, k), dtype=torch.float64)
        uv_full, _ = full.project(pts)
        uv_small, _ = small.project(pts)
        # pixel j of the shrunk image averages pixels jk .. jk+k-1: its centre is at jk + (k-1)/2
        torch.testing.assert_close(uv_small, (uv_full - (k - 1) / 2) / k, atol=1e-9, rtol=0, msg=cam.model)


def test_capture_data_layout_and_targets():
    from nurec_usd.train.data import CaptureData

    capture = load_capture(REPO / "samples" / "tiny")
    data = CaptureData(capture, "cpu", eval_every=8, downscale=2)
    assert len(data.frames) == 40 and len(data.eval_frames) == 4  # frame 4 of each camera
    assert all(f.frame == 4 for f in data.eval_frames)
    assert [s.sweep for s in data.eval_sweeps] == [4]
    cam = data.cameras[0]
    assert cam.images.shape == (10, 90, 160, 3) and cam.images.dtype == torch.uint8
    view = data.camera_view(data.train_frames[0])
    assert view.batch.width == 160 and view.rays_camera.shape == (90, 160, 3)
    target, mask = data.target_image(data.train_frames[0])
    assert target.dtype == torch.float32 and float(target.max()) <= 1.0 and mask is None
    rng, inten = data.lidar_target(data.train_sweeps[0])
    sweep = capture.lidars["top"].load_sweep(data.train_sweeps[0].sweep)
    # every ray with a return holds one of the sweep's points (duplicates in a ray keep the nearest)
    assert 0.9 * len(sweep) <= int((rng > 0).sum()) <= len(sweep)
    # intensities are normalised by the training returns' 99th percentile
    assert data.intensity_scale > 0 and float(inten.max()) <= 1.0 and float(inten[rng > 0].mean()) > 0


def test_coarse_targets_of_a_group_with_and_without_masks_at_an_odd_height():
    """At downscale 4 the tiny sample's images are 80x45: a coarse (level 2) target of a group
    where some cameras have masks and others none stacks masks of one size."""
    from nurec_usd.train.data import CaptureData

    capture = load_capture(REPO / "samples" / "tiny")
    data = CaptureData(capture, "cpu", eval_every=8, downscale=4)
    assert data.cameras[0].images.shape[1] == 45  # odd: a level-2 pixel grid drops the last row
    data.cameras[0].masks = torch.ones(data.cameras[0].images.shape[:3], dtype=torch.bool)
    data.cameras[0].masks[:, :2] = False  # the top two rows do not count
    group = data.groups(data.train_frames, 0)[0]
    assert len(group.frames) > 1 and any(data.cameras[r.camera].masks is None for r in group.frames)
    image, mask = data.target_images(group, level=2)
    assert image.shape[1:3] == (22, 40) and mask.shape == (len(group.frames), 22, 40)
    first = [i for i, r in enumerate(group.frames) if r.camera == 0][0]
    assert not bool(mask[first, 0].any()) and bool(mask[first, 1:].all())
    assert bool(mask[[i for i in range(len(group.frames)) if i != first]].all())


def test_lens_mask_covers_exactly_the_imaged_circle():
    from nurec_usd.train.data import CaptureData

    data = CaptureData(load_capture(REPO / "samples" / "tiny"), "cpu", eval_every=8, downscale=2)
    lens = {cam.id: cam.lens for cam in data.cameras}
    assert lens["front"] is None and lens["front_left"] is None  # these image every pixel
    ftheta = next(cam for cam in data.cameras if cam.id == "right_ftheta")
    m = ftheta.lens
    assert 0.5 < float(m.float().mean()) < 0.99
    img = ftheta.images.float()  # the sample's f-theta frames are black outside the lens circle
    assert float(img[:, ~m].mean()) < 2.0 < 20.0 < float(img[:, m].mean())
    # renders are black there too
    from nurec_usd.scene.gaussians import GaussianParams, Scene
    from nurec_usd.render.scene_renderer import SceneRenderer

    g = GaussianParams.create(torch.zeros(0, 3), torch.zeros(0, 3), torch.zeros(0, 3))
    scene = Scene(g, g, torch.zeros(0, dtype=torch.int32), [], torch.zeros(3, 4, 16),
                  [c.id for c in data.cameras], torch.zeros(len(data.cameras), 6))
    ref = next(f for f in data.frames if data.cameras[f.camera].id == "right_ftheta")
    out = SceneRenderer(scene).camera(data.camera_view(ref))
    assert out.raw.depth is None  # a scene's camera image is rendered without the depth image
    image = out.image
    assert float(image[~m].abs().max()) == 0.0 and float(image[m].min()) > 0.4  # sky (sigmoid 0 = 0.5) inside


def test_range_images_of_a_batch_are_those_of_each_sweep():
    from nurec_usd.train.data import _sweep_tensors, range_image, range_images

    capture = load_capture(REPO / "samples" / "tiny")
    lidar = capture.lidars["top"]
    model = lidar.sensor_model(dtype=torch.float64)
    sweeps = [lidar.load_sweep(i) for i in range(3)]
    batch = range_images([_sweep_tensors(s.points, s.intensity, s.channel, "cpu") for s in sweeps], model,
                         lidar.channels, lidar.columns)
    assert batch[0].shape == (3, lidar.channels, lidar.columns)
    for k, s in enumerate(sweeps):
        alone = range_image(s.points, s.intensity, s.channel, model, lidar.channels, lidar.columns)
        assert torch.equal(batch[0][k], alone[0]) and torch.equal(batch[1][k], alone[1])
        assert int((alone[0] > 0).sum()) > 0.9 * len(s)  # the batch does not shift one sweep's rays into another


def test_initialisation_from_the_sweeps_kept_at_load_equals_reading_them_again():
    from nurec_usd.scene.init import lidar_world_points
    from nurec_usd.train.data import CaptureData

    capture = load_capture(REPO / "samples" / "tiny")
    data = CaptureData(capture, "cpu", eval_every=8, downscale=2)
    sweeps = [("top", s.sweep) for s in data.train_sweeps]
    assert set(data.sweep_points) == set(sweeps)  # the training sweeps only
    kept = lidar_world_points(capture, sweeps, "cpu", loaded=data.sweep_points)
    read = lidar_world_points(capture, sweeps, "cpu")
    for a, b in zip(kept, read):
        assert a.dtype == b.dtype and torch.equal(a, b)
    data.release_sweep_points()
    assert data.sweep_points == {}


def test_frames_recorded_together_form_one_group_per_instant():
    from nurec_usd.train.data import CaptureData, FrameRef, group_frames

    data = CaptureData(load_capture(REPO / "samples" / "tiny"), "cpu", eval_every=8, downscale=2)
    groups = data.groups(data.train_frames)
    assert len(groups) == 9 and all(len(g.frames) == 4 for g in groups)  # 4 cameras of one size, 9 instants
    assert all(len({r.time_s for r in g.frames}) == 1 for g in groups)
    assert [len(g.frames) for g in data.groups(data.train_frames, max_cameras=3)] == [3, 1] * 9
    assert all(len(g.frames) == 1 for g in data.groups(data.train_frames, max_cameras=1))
    # frames apart in time, or of cameras of another size, are not grouped; a camera appears once
    refs = [FrameRef(0, 0, 0.0, False), FrameRef(1, 0, 0.004, False), FrameRef(2, 0, 0.0, False),
            FrameRef(1, 1, 0.05, False), FrameRef(0, 1, 0.1, False)]
    got = group_frames(refs, [(10, 10), (10, 10), (20, 10)])
    assert [[(r.camera, r.frame) for r in g.frames] for g in got] == [[(0, 0), (1, 0)], [(2, 0)], [(1, 1)], [(0, 1)]]
    twice = group_frames([FrameRef(0, 0, 0.0, False), FrameRef(0, 1, 0.003, False)], [(10, 10)])
    assert [len(g.frames) for g in twice] == [1, 1]
    views = data.camera_views(groups[0], level=2)
    target, mask = data.target_images(groups[0], level=2)
    assert views.batch.width == 80 and len(views.batch) == 4 and views.rays_camera.shape == (4, 45, 80, 3)
    assert target.shape == (4, 45, 80, 3) and mask is None
    full, _ = data.target_images(groups[0])
    torch.testing.assert_close(target[0, 0, 0], full[0, :2, :2].mean((0, 1)))  # shrunk by averaging
