"""Initialisation steps: voxel means, actor point split, range images, sky lookup, scene files."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from nurec_usd.render.scene_renderer import sky_colors
from nurec_usd.scene.gaussians import ActorTrack, GaussianParams, Scene
from nurec_usd.scene.init import split_actor_points, voxel_downsample
from nurec_usd.sensors.lidar import SpinningLidarModel
from nurec_usd.sensors.se3 import PoseTrajectory
from nurec_usd.train.data import held_out, range_image


def test_voxel_downsample_averages_each_voxel():
    pts = torch.tensor([[0.1, 0.1, 0.1], [0.3, 0.3, 0.3], [1.5, 0.2, 0.2], [-0.4, 0.0, 0.0]])
    feat = torch.tensor([1.0, 3.0, 5.0, 7.0])
    out, f = voxel_downsample(pts, 1.0, feat)
    rows = {tuple(np.round(p.tolist(), 4)): float(v) for p, v in zip(out, f)}
    assert rows == {(0.2, 0.2, 0.2): 2.0, (1.5, 0.2, 0.2): 5.0, (-0.4, 0.0, 0.0): 7.0}


def _grown_on_raw_points(pts, voxel, cap, *features):
    """The slow twin of ``_downsample_to``: every growth downsamples the raw points again."""
    while True:
        out = voxel_downsample(pts, voxel, *features)
        if out[0].shape[0] <= cap:
            return out, voxel
        voxel *= 1.25


@pytest.mark.parametrize("cap", [150_000, 100_000, 20_000, 5_000])
def test_downsampling_to_a_cap_gives_the_raw_growths_cloud(cap):
    """``_downsample_to`` finds its voxel on merged voxel means, then downsamples the raw points:
    the cloud, features and voxel are those of growing on the raw points every time. On a
    street-like cloud (a dense ground, two facades), caps that need 0, 1, 7 and 11 growths."""
    from nurec_usd.scene.init import _downsample_to, _voxel_means

    gen = torch.Generator().manual_seed(0)
    ground = torch.rand(60_000, 3, generator=gen, dtype=torch.float64) * torch.tensor([40.0, 12.0, 0.02])
    wall = torch.rand(30_000, 3, generator=gen, dtype=torch.float64) * torch.tensor([40.0, 0.02, 8.0])
    pts = torch.cat([ground, wall, wall + torch.tensor([0.0, 12.0, 0.0], dtype=torch.float64)])
    inten = pts[:, 2].clone()
    (kept, kept_int), voxel = _downsample_to(pts, 0.05, cap, inten)
    (want, want_int), want_voxel = _grown_on_raw_points(pts, 0.05, cap, inten)
    assert voxel == want_voxel and torch.equal(kept, want) and torch.equal(kept_int, want_int)
    # the merged means keep every point's weight: their count-weighted centroid is the raw one
    step, w = _voxel_means(pts, 0.05, [inten])
    grown, w2 = _voxel_means(step[0], 0.0625, step[1:], w)
    assert float(w2.sum()) == pts.shape[0] and grown[0].shape[0] < step[0].shape[0]
    assert torch.allclose((grown[0] * w2[:, None]).sum(0) / pts.shape[0], pts.mean(0), atol=1e-9)
    assert torch.allclose((grown[1] * w2).sum() / pts.shape[0], inten.mean(), atol=1e-9)


def _moving_track() -> ActorTrack:
    # a 4 x 2 x 1.5 m box driving along +x at 10 m/s from t = 0 to 1, yawed 90 degrees at the end
    times = torch.tensor([0.0, 1.0], dtype=torch.float64)
    T = torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    T[1, :3, 3] = torch.tensor([10.0, 0.0, 0.0])
    T[1, :3, :3] = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype=torch.float64)
    return ActorTrack("car", "car", [4.0, 2.0, 1.5], times, T)


@pytest.mark.parametrize("n", [2, 3, 4, 3000])
def test_initial_scales_are_the_clamped_mean_of_the_three_nearest(n):
    """``initial_scales`` searches neighbours only out to 3 x the ceiling: its scales are still
    the mean distance to the 3 nearest neighbours (the missing ones of a tiny cloud at the
    ceiling), clamped, as the brute-force twin gives them; here with dense clusters, sparse points
    (as drawn above the lidar) and isolated ones past the search."""
    from nurec_usd.ops.reference import knn_distances_reference
    from nurec_usd.scene.init import initial_scales

    g = torch.Generator().manual_seed(n)
    pts = torch.cat([torch.randn(n // 2, 3, generator=g) * 0.3,
                     torch.rand(n - n // 2 - n // 100, 3, generator=g) * torch.tensor([60.0, 60.0, 20.0]),
                     torch.rand(n // 100, 3, generator=g) * 2000.0]).double()
    floor, ceiling = 0.005, 1.0
    d = knn_distances_reference(pts.float(), 3)
    want = torch.where(torch.isfinite(d), d, torch.full_like(d, ceiling)).mean(-1).clamp(floor, ceiling)
    got = initial_scales(pts, floor, ceiling)
    assert got.shape == (n, 3) and got.dtype == torch.float64
    torch.testing.assert_close(got[:, 0].float(), want, rtol=1e-5, atol=0.0)
    if n == 3000:  # both cases occur: the ceiling, and in between
        assert (got[:, 0] == ceiling).sum() > 100 and ((got[:, 0] > floor) & (got[:, 0] < ceiling)).sum() > 100


def test_points_inside_a_moving_box_go_to_the_actor_in_its_frame():
    track = _moving_track()
    pts = torch.tensor([[1.5, 0.5, 0.0],  # t=0: inside (box at the origin)
                        [11.5, 0.5, 0.0],  # t=1: box at x=10, yawed: local x = 0.5, y = -1.5 -> outside (width 2)
                        [10.5, 1.5, 0.0],  # t=1: local (1.5, -0.5, 0) -> inside
                        [5.0, 0.0, 0.0],  # t=0.5: box at x=5 -> inside at the centre
                        [5.0, 0.0, 0.0]], dtype=torch.float64)  # t=2: outside the track's time range
    times = torch.tensor([0.0, 1.0, 1.0, 0.5, 2.0], dtype=torch.float64)
    static, per_actor = split_actor_points(pts, times, [track], margin=0.0)
    assert static.tolist() == [False, True, False, False, True]
    local = per_actor[0]
    torch.testing.assert_close(local[0], torch.tensor([1.5, 0.5, 0.0], dtype=torch.float64))
    torch.testing.assert_close(local[1], torch.tensor([1.5, -0.5, 0.0], dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(local[2], torch.zeros(3, dtype=torch.float64), atol=1e-9, rtol=0)


def _split_every_point(points, times, tracks, margin):
    """The actor split with no pre-selection: every point in a track's time range is moved into
    its box frame at its own time."""
    from nurec_usd.sensors.se3 import PoseTrajectory, invert_transform, transform_points

    static = torch.ones(points.shape[0], dtype=torch.bool)
    per_actor = []
    for track in tracks:
        cand = torch.nonzero((times >= track.times[0]) & (times <= track.times[-1]) & static).flatten()
        local = transform_points(invert_transform(PoseTrajectory(track.times, track.T_world_box).at(times[cand])),
                                 points[cand])
        inside = (local.abs() <= torch.tensor(track.size_m, dtype=points.dtype) / 2 * (1 + margin)).all(-1)
        static[cand[inside]] = False
        per_actor.append(local[inside])
    return static, per_actor


def test_the_near_track_preselection_changes_no_split():
    """Points are only tested against a box near its centre's path; the split equals testing every
    point, for turning, accelerating tracks and points crowded around the boxes' edges."""
    gen = torch.Generator().manual_seed(3)
    tracks = []
    for a in range(3):
        times = torch.linspace(0.2 * a, 2.0, 9, dtype=torch.float64)
        yaw = torch.cumsum(0.4 * torch.randn(9, generator=gen, dtype=torch.float64), 0)
        T = torch.eye(4, dtype=torch.float64).repeat(9, 1, 1)
        T[:, 0, 0], T[:, 0, 1], T[:, 1, 0], T[:, 1, 1] = yaw.cos(), -yaw.sin(), yaw.sin(), yaw.cos()
        T[:, :3, 3] = torch.cumsum(3.0 * torch.rand(9, 3, generator=gen, dtype=torch.float64), 0) * torch.tensor(
            [1.0, 1.0, 0.1], dtype=torch.float64)
        tracks.append(ActorTrack(f"car{a}", "car", [4.0, 2.0, 1.5], times, T))
    times = torch.rand(20_000, generator=gen, dtype=torch.float64) * 2.4 - 0.2
    # around the boxes at their times (many near the faces), and far away
    centre = torch.stack([PoseTrajectory(t.times, t.T_world_box).at(times)[:, :3, 3] for t in tracks])
    pick = torch.randint(0, 3, (20_000,), generator=gen)
    points = centre[pick, torch.arange(20_000)] + (torch.rand(20_000, 3, generator=gen, dtype=torch.float64) - 0.5) * 6
    points[::7] += 40.0
    static, per_actor = split_actor_points(points, times, tracks, margin=0.05)
    want_static, want_actor = _split_every_point(points, times, tracks, margin=0.05)
    assert torch.equal(static, want_static)
    assert 0 < int((~static).sum()) < 20_000
    for got, want in zip(per_actor, want_actor):
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_range_image_keeps_the_nearest_return_of_each_ray():
    model = SpinningLidarModel([-10.0, 0.0, 10.0], columns=8, rotation="counterclockwise", scan_rate_hz=10.0,
                               min_range_m=0.5, max_range_m=100.0, dtype=torch.float64)
    dirs = model.ray_directions()  # [C, W, 3]
    pts = np.stack([dirs[1, 2] * 5.0, dirs[1, 2] * 7.0, dirs[0, 5] * 12.0]).astype(np.float32)
    rng, inten = range_image(pts, np.array([0.3, 0.9, 0.5], np.float32), np.array([1, 1, 0]), model, 3, 8)
    assert rng.shape == (3, 8)
    assert float(rng[1, 2]) == pytest.approx(5.0, abs=1e-4)
    assert float(inten[1, 2]) == pytest.approx(0.3)
    assert float(rng[0, 5]) == pytest.approx(12.0, abs=1e-4)
    assert int((rng > 0).sum()) == 2


def test_held_out_is_every_eighth_index():
    assert [i for i in range(20) if held_out(i, 8)] == [4, 12]
    assert not any(held_out(i, 0) for i in range(20))


def test_sky_lookup_wraps_in_azimuth_and_orders_elevation():
    sky = torch.full((3, 4, 16), -5.0)
    sky[0, 0, :] = 5.0  # top row red: looking up
    sky[1, :, 0] = 5.0  # first column green: azimuth -180 ...
    sky[1, :, -1] = 5.0  # ... and the last: +180
    up = sky_colors(sky, torch.tensor([[0.0, 0.0, 1.0]]))
    assert float(up[0, 0]) > 0.9
    behind = sky_colors(sky, torch.tensor([[-1.0, 1e-6, 0.0], [-1.0, -1e-6, 0.0]]))
    assert bool((behind[:, 1] > 0.9).all())  # both sides of the seam are green
    ahead = sky_colors(sky, torch.tensor([[1.0, 0.0, 0.0]]))
    assert float(ahead[0, 1]) < 0.1


def test_scene_file_round_trip(tmp_path):
    g = GaussianParams.create(torch.rand(5, 3), torch.rand(5, 3) + 0.1, torch.rand(5, 3))
    a = GaussianParams.create(torch.rand(2, 3), torch.rand(2, 3) + 0.1, torch.rand(2, 3))
    scene = Scene(g, a, torch.tensor([0, 0], dtype=torch.int32), [_moving_track()], torch.zeros(3, 4, 16),
                  ["front"], torch.zeros(1, 6), sh_degree=2, world_offset_m=[1.0, 2.0, 3.0],
                  metadata={"intensity_scale": 1.0})
    scene.save(tmp_path / "scene.pt")
    back = Scene.load(tmp_path / "scene.pt")
    for name in GaussianParams.FIELDS:
        assert torch.equal(getattr(back.static, name), getattr(g, name))
        assert torch.equal(getattr(back.actors, name), getattr(a, name))
    assert back.sh_degree == 2 and back.camera_ids == ["front"] and back.world_offset_m == [1.0, 2.0, 3.0]
    assert torch.equal(back.tracks[0].T_world_box, scene.tracks[0].T_world_box)
    (tmp_path / "bad.pt").write_bytes(b"not a scene")
    with pytest.raises(ValueError, match="bad.pt"):
        Scene.load(tmp_path / "bad.pt")
    assert not math.isnan(float(back.static.means.sum()))


def test_sweeps_placed_in_chunks_equal_one_chunk():
    """``lidar_world_points`` places the sweeps chunk by chunk (read ahead in threads): chunks
    of a few thousand points (several sweeps each, and a remainder) give the same points,
    intensities and times, in the same order, as one chunk."""
    from pathlib import Path

    from nurec_usd.capture import load_capture
    from nurec_usd.scene.init import lidar_world_points

    capture = load_capture(Path(__file__).resolve().parents[2] / "samples" / "tiny")
    lidar_id = next(iter(capture.lidars))
    sweeps = [(lidar_id, i) for i in range(len(capture.lidars[lidar_id].sweeps))]
    whole = lidar_world_points(capture, sweeps, chunk_points=10 ** 9)
    calls = []
    chunked = lidar_world_points(capture, sweeps, chunk_points=15_000, progress=lambda: calls.append(1))
    assert len(calls) == len(sweeps) and whole[0].shape[0] > 3 * 15_000
    for a, b in zip(whole, chunked):
        assert torch.equal(a, b)


def test_full_size_images_repeat_each_shrunk_pixel():
    """Each full-size pixel takes the shrunk pixel covering it: a 2x3 image stretched to 4x6 is
    its 2x2 blocks, and to 5x7 (sizes a downscale rounds) every row and column maps inside it."""
    from nurec_usd.scene.init import full_size_images

    small = torch.arange(18, dtype=torch.uint8).reshape(2, 3, 3)
    big = full_size_images(lambda cam, i: small, {"cam": (4, 6)})("cam", 0)
    assert big.dtype == torch.uint8 and big.shape == (4, 6, 3)
    assert torch.equal(big, small.repeat_interleave(2, 0).repeat_interleave(2, 1))
    odd = full_size_images(lambda cam, i: small, {"cam": (5, 7)})("cam", 0)
    assert odd.shape == (5, 7, 3) and torch.equal(odd[0, 0], small[0, 0]) and torch.equal(odd[-1, -1], small[-1, -1])


def test_a_downscaled_build_decodes_no_frame_again_for_its_colours(handmade_capture, monkeypatch):
    """initial_scene at downscale 2 colours from the frames CaptureData decoded: reading a frame
    from its file again fails the test; the colours are those of full-size decoding within the
    shrinking's blur."""
    from nurec_usd.capture.importers import load_any
    from nurec_usd.capture.model import CameraFrame
    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.data import CaptureData

    config = make_config("fast", downscale=2)
    cap = load_any(handmade_capture)
    full = initial_scene(cap, CaptureData(cap, "cpu", downscale=1), config.init)
    data = CaptureData(cap, "cpu", downscale=2)

    def no_decode(self):
        raise AssertionError(f"{self.image_path} decoded again")

    monkeypatch.setattr(CameraFrame, "load_image", no_decode)
    shrunk = initial_scene(cap, data, config.init)
    colour = lambda s: (s.static.sh0[:, 0] * 0.28209479177387814 + 0.5)  # noqa: E731
    assert shrunk.static.means.shape == full.static.means.shape
    assert float((colour(shrunk) - colour(full)).abs().mean()) < 0.05


def test_masked_pixels_colour_no_point():
    """``colour_points`` with masks: a frame's masked pixels (the ego vehicle's) colour nothing. All
    pixels masked, every point stays unseen (grey 0.5); none masked, the colours are those without
    masks; the front camera's bottom half masked, no point seen only there takes its colour."""
    from pathlib import Path

    from nurec_usd.capture import load_capture
    from nurec_usd.scene.init import colour_points, scene_tracks

    capture = load_capture(Path(__file__).resolve().parents[2] / "samples" / "tiny")
    tracks = scene_tracks(capture)
    frames = [(cam, 0) for cam in capture.cameras]
    g = torch.Generator().manual_seed(0)
    pts = torch.randn(4000, 3, generator=g, dtype=torch.float64) * torch.tensor([20.0, 8.0, 1.0], dtype=torch.float64)
    actors = [torch.zeros(0, 3, dtype=torch.float64) for _ in tracks]
    size = {c.id: (c.height, c.width) for c in capture.cameras.values()}

    def masks(value):
        return lambda cam, i: torch.full(size[cam], value, dtype=torch.bool)

    plain, _ = colour_points(capture, frames, pts, actors, tracks, torch.device("cpu"))
    assert float((plain != 0.5).any(-1).float().mean()) > 0.3  # many points are seen
    none_masked, _ = colour_points(capture, frames, pts, actors, tracks, torch.device("cpu"), masks=masks(True))
    assert torch.equal(none_masked, plain)
    all_masked, _ = colour_points(capture, frames, pts, actors, tracks, torch.device("cpu"), masks=masks(False))
    assert bool((all_masked == 0.5).all())
    front = next(iter(capture.cameras))

    def bottom_of_front(cam, i):  # the front camera's lower half does not count
        m = torch.ones(size[cam], dtype=torch.bool)
        if cam == front:
            m[size[cam][0] // 2:] = False
        return m

    only_front = [(front, 0)]
    top_only, _ = colour_points(capture, only_front, pts, actors, tracks, torch.device("cpu"), masks=bottom_of_front)
    whole, _ = colour_points(capture, only_front, pts, actors, tracks, torch.device("cpu"))
    lost = (whole != 0.5).any(-1) & (top_only == 0.5).all(-1)  # seen by the front camera, in its lower half only
    assert int(lost.sum()) > 20 and bool(torch.equal(top_only[~lost], whole[~lost]))


def test_masked_pixels_seed_no_frustum_point_and_no_sky_colour():
    """Captures without lidar or SfM points: ``frustum_points`` draws no point on a masked pixel
    (the front camera's lower half masked, every point of that frame lands in its upper half,
    coloured by its pixel; all masked, none); ``sky_init`` averages the unmasked top pixels only."""
    from pathlib import Path

    from nurec_usd.capture import load_capture
    from nurec_usd.scene.init import frustum_points, sky_init

    capture = load_capture(Path(__file__).resolve().parents[2] / "samples" / "tiny")
    front = next(iter(capture.cameras))
    cam = capture.cameras[front]
    h, w = cam.height, cam.width
    upper = torch.ones(h, w, dtype=torch.bool)
    upper[h // 2:] = False
    pts, rgb = frustum_points(capture, [(front, 0)], 2000, masks=lambda c, i: upper)
    assert 800 < pts.shape[0] < 1200  # about half the draws
    t = torch.tensor([float(capture.seconds(cam.frames[0].timestamp_us))], dtype=torch.float64)
    T_wc = capture.rig_trajectory().at(t)[0] @ torch.as_tensor(cam.T_rig_camera, dtype=torch.float64)
    uv, ok = cam.sensor_model(dtype=torch.float64).project((pts - T_wc[:3, 3]) @ T_wc[:3, :3])
    px = (uv + 0.5).floor().long()
    assert bool(ok.all()) and int(px[:, 1].max()) < h // 2
    image = torch.from_numpy(np.array(cam.frames[0].load_image())).float() / 255
    assert torch.allclose(rgb, image[px[:, 1], px[:, 0]], atol=1e-6)
    none, _ = frustum_points(capture, [(front, 0)], 2000, masks=lambda c, i: torch.zeros(h, w, dtype=torch.bool))
    assert none.shape[0] == 0

    # top rows: red on the left half (masked), blue on the right
    painted = torch.zeros(h, w, 3, dtype=torch.uint8)
    painted[:, : w // 2, 0] = 255
    painted[:, w // 2:, 2] = 255
    right = torch.zeros(h, w, dtype=torch.bool)
    right[:, w // 2:] = True
    sky = torch.sigmoid(sky_init(capture, [(front, 0)], 2, images=lambda c, i: painted, masks=lambda c, i: right))
    assert torch.allclose(sky[:, 0, 0], torch.tensor([0.02, 0.02, 0.98]), atol=1e-5)
    plain = torch.sigmoid(sky_init(capture, [(front, 0)], 2, images=lambda c, i: painted))
    assert torch.allclose(plain[:, 0, 0], torch.tensor([0.5, 0.02, 0.5]), atol=1e-2)
