"""``points_above_lidar``: Gaussians seeded where the cameras see above the lidar's reach, on the
hand-made street, whose facades and far wall rise past the lidar's highest beam (10 degrees)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from handmade import CAMERAS, _Scene, _transform

from nurec_usd.capture.importers import load_any
from nurec_usd.scene.init import (colour_and_coverage, colour_points, lidar_coverage, lidar_world_points,
                                  points_above_lidar, scene_tracks, split_actor_points)


def _static_points(cap) -> torch.Tensor:
    sweeps = [(lid, i) for lid, lidar in cap.lidars.items() for i in range(len(lidar.sweeps))]
    pts, _, times = lidar_world_points(cap, sweeps)
    static, _ = split_actor_points(pts, times, scene_tracks(cap), 0.05)
    return pts[static]


def test_points_lie_on_the_surfaces_above_the_lidar(handmade_capture):
    """One front frame: about the requested number of points, all above the highest return of
    their column band, coloured by their pixel, and along their rays within a quarter of the
    closed-form distance (the band's top distance, spread by about 1.25x)."""
    cap = load_any(handmade_capture)
    static = _static_points(cap)
    frame = ("front", 0)
    pts, rgb = points_above_lidar(cap, [frame], static, 2000, torch.device("cpu"), seed=2, pixels_per_point=1)
    assert 1500 <= pts.shape[0] <= 2000
    cam = cap.cameras["front"]
    _, model, intr, R, pos, _, _ = next(c for c in CAMERAS if c[0] == "front")
    scene = _Scene()
    t = torch.tensor([float(cap.seconds(cam.frames[0].timestamp_us))], dtype=torch.float64)
    T_wc = cap.rig_trajectory().at(t)[0] @ torch.as_tensor(cam.T_rig_camera, dtype=torch.float64)
    centre = T_wc[:3, 3]
    dirs = pts - centre
    dist = dirs.norm(dim=-1)
    # the analytic scene's frame is the capture's world shifted (the importer keeps real logs'
    # large coordinates apart): the same rotation, the camera centre offset
    T_scene = scene.rig_at(t)[0] @ torch.from_numpy(_transform(R, pos))
    assert torch.allclose(T_scene[:3, :3], T_wc[:3, :3], atol=1e-9)
    origin = (T_scene[:3, 3]).expand_as(dirs)
    truth, _, _, _ = scene.cast(origin, dirs / dist[:, None], t.expand(len(dirs)))
    rel = (dist - truth).abs() / truth
    assert float(rel.median()) < 0.25
    # above the coverage: every point is higher in the image than the lidar's returns of its band
    pc = (pts - T_wc[:3, 3]) @ T_wc[:3, :3]
    uv, _ = cam.sensor_model(dtype=torch.float64).project(pc)
    spc = (static - T_wc[:3, 3]) @ T_wc[:3, :3]
    suv, sok = cam.sensor_model(dtype=torch.float64).project(spc)
    sok &= (spc[:, 2] > 0.1) & (suv[:, 0] >= -0.5) & (suv[:, 0] < cam.width - 0.5) & (suv[:, 1] >= -0.5)
    assert float(uv[:, 1].max()) < float(suv[sok, 1].max())
    assert float((uv[:, 1] < suv[sok, 1].min() + 0.5).float().mean()) > 0.3  # many are above every return
    image = torch.from_numpy(np.array(cam.frames[0].load_image())).float() / 255
    px = (uv + 0.5).floor().long()
    assert torch.allclose(rgb, image[px[:, 1], px[:, 0]], atol=1e-6)


def test_masked_pixels_seed_nothing(handmade_capture):
    """The front camera's points lie in rows 0-27 (the lidar covers the rest); with rows 0-11
    masked (the ego vehicle's, say) they come from rows 12-27 only."""
    cap = load_any(handmade_capture)
    static = _static_points(cap)
    cam = cap.cameras["front"]
    top_masked = torch.ones(cam.height, cam.width, dtype=torch.bool)
    top_masked[:12] = False  # False: the pixel does not count
    T_wc = cap.rig_trajectory().at(torch.tensor([float(cap.seconds(cam.frames[0].timestamp_us))],
                                                dtype=torch.float64))[0] @ torch.as_tensor(cam.T_rig_camera,
                                                                                            dtype=torch.float64)
    rows = []
    for masks in (None, lambda _c, _i: top_masked):
        pts, _ = points_above_lidar(cap, [("front", 0)], static, 2000, torch.device("cpu"), masks=masks,
                                    pixels_per_point=1)
        uv, _ = cam.sensor_model(dtype=torch.float64).project((pts - T_wc[:3, 3]) @ T_wc[:3, :3])
        rows.append((uv[:, 1] + 0.5).floor())
    assert float(rows[0].min()) == 0 and float(rows[0].max()) < 30
    assert rows[1].numel() > 200 and float(rows[1].min()) == 12


def test_the_initial_scene_counts_them_in_max_points(handmade_capture):
    """``initial_scene``: the points above the lidar come on top of the lidar's within
    ``max_points``, at most a quarter of it; the lidar's points fit what is left (as a build
    with that smaller cap and none above would place them); 0 turns them off."""
    import re

    from nurec_usd.pipeline import initial_scene
    from nurec_usd.train.config import make_config
    from nurec_usd.train.data import CaptureData

    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu")

    def build(above: int, max_points: int) -> tuple[int, int]:
        messages = []
        config = make_config("fast", above_lidar_points=above, max_points=max_points, voxel_m=0.05)
        n = initial_scene(cap, data, config.init, log=messages.append).static.means.shape[0]
        said = [int(m.group(1).replace(",", "")) for m in map(re.compile(r"above the lidar's reach: ([\d,]+)").search,
                                                                 messages) if m]
        return n, (said[0] if said else 0)

    for above, max_points, lidar_cap in ((600, 4000, 3400), (50_000, 4000, 3000)):
        total, extra = build(above, max_points)
        lidar_only, none = build(0, lidar_cap)
        assert none == 0 and 0.7 * min(above, max_points // 4) <= extra <= min(above, max_points // 4)
        assert total == lidar_only + extra <= max_points


def test_a_frame_seeds_no_more_points_than_its_pixels_above_the_coverage(handmade_capture):
    """However many points are asked for, a frame draws one per ``pixels_per_point`` pixels of
    the room above its coverage at most: 32 pixels a point give about a 32nd of 1 pixel a point."""
    cap = load_any(handmade_capture)
    static = _static_points(cap)
    n = {ppp: points_above_lidar(cap, [("front", 0)], static, 10**6, torch.device("cpu"),
                                 pixels_per_point=ppp)[0].shape[0] for ppp in (1, 32)}
    cam = cap.cameras["front"]
    assert n[1] < cam.width * cam.height / 2  # the room above the lidar's top beam: far less than the image
    assert 25 < n[1] / n[32] < 40


def test_the_colour_pass_gives_the_coverage_the_points_are_seeded_from(handmade_capture):
    """``colour_and_coverage`` (the build's one pass over the frames) returns the colours of
    ``colour_points`` and the coverage of ``lidar_coverage`` (the second pass it saves), and
    ``points_above_lidar`` given that coverage draws the points it draws without it. The
    coverage is not trivial: in every frame most bands have returns, their tops well inside
    the image (room above them to seed)."""
    cap = load_any(handmade_capture)
    static = _static_points(cap)
    tracks = scene_tracks(cap)
    actors = [torch.zeros(5, 3, dtype=torch.float64) for _ in tracks]
    frames = [(cam_id, i) for cam_id, cam in cap.cameras.items() for i in (0, len(cam.frames) - 1)]
    cpu = torch.device("cpu")
    rgb, actor_rgb, cover = colour_and_coverage(cap, frames, static, actors, tracks, cpu)
    plain, plain_actor = colour_points(cap, frames, static, actors, tracks, cpu)
    assert torch.equal(rgb, plain) and all(torch.equal(a, b) for a, b in zip(actor_rgb, plain_actor))
    alone = lidar_coverage(cap, frames, static, cpu)
    assert cover.shape == alone.shape == (len(frames), 2, 65)
    assert torch.allclose(cover, alone, rtol=1e-9, atol=1e-9)  # inf where a band has no return
    for k in range(len(frames)):
        tops = cover[k, 0, :64]
        covered = tops[torch.isfinite(tops)]
        assert covered.numel() >= 40 and 10 < float(covered.min()) and float(covered.max()) < 90
    shared = points_above_lidar(cap, frames, static, 3000, cpu, seed=4, coverage=cover)
    separate = points_above_lidar(cap, frames, static, 3000, cpu, seed=4)
    assert shared[0].shape[0] > 100
    assert torch.allclose(shared[0], separate[0], atol=1e-9) and torch.equal(shared[1], separate[1])
    with pytest.raises(ValueError, match="coverage of shape"):  # another frame list's
        points_above_lidar(cap, frames[:2], static, 3000, cpu, coverage=cover)


def test_the_initial_scene_drops_those_a_training_sweep_saw_through(handmade_capture):
    """``initial_scene`` draws the same points with and without ``above_lidar_free_space_m``,
    and with it keeps exactly those that no training sweep saw through (``seen_through``, in
    ``CaptureData.training_ranges``); it says how many it dropped."""
    import re

    from nurec_usd.pipeline import initial_scene
    from nurec_usd.scene.free_space import seen_through
    from nurec_usd.train.config import make_config
    from nurec_usd.train.data import CaptureData

    cap = load_any(handmade_capture)
    data = CaptureData(cap, "cpu")

    def drawn(margin: float) -> tuple[torch.Tensor, list[str]]:
        messages = []
        config = make_config("fast", above_lidar_points=3000, max_points=12000, voxel_m=0.05,
                             above_lidar_free_space_m=margin)
        means = initial_scene(cap, data, config.init, log=messages.append).static.means
        said = [m for m in messages if "above the lidar's reach" in m]
        n = int(re.search(r"reach: ([\d,]+)", said[0]).group(1).replace(",", ""))
        return means[-n:], said

    every, said_every = drawn(-1)
    kept, said_kept = drawn(0.3)
    ranges = data.training_ranges()
    assert len(ranges) == 1 and ranges[0].count == len(data.train_sweeps) < len(data.sweeps) == ranges[0].ranges.shape[0]
    seen = seen_through(every.double(), ranges[0], 0.3)
    assert 0 < int(seen.sum()) < 0.1 * every.shape[0]
    torch.testing.assert_close(kept, every[~seen], rtol=0, atol=0)
    assert "saw through" not in said_every[0] and f"({int(seen.sum()):,} more were in space" in said_kept[0]


def test_frames_of_several_cameras_in_any_order(handmade_capture):
    """Frames of several cameras are drawn camera by camera, each camera's pixels unprojected in
    one call and placed with their own frame's pose: the frames interleaved across cameras give
    exactly the points and colours of the same frames listed camera by camera."""
    cap = load_any(handmade_capture)
    static = _static_points(cap)
    cams = [c for c in cap.cameras if len(cap.cameras[c].frames) >= 2][:3]
    assert len(cams) >= 2
    grouped = [(c, i) for c in cams for i in (0, 1)]
    interleaved = [(c, i) for i in (0, 1) for c in cams]
    a = points_above_lidar(cap, grouped, static, 3000, torch.device("cpu"), seed=5, pixels_per_point=4)
    b = points_above_lidar(cap, interleaved, static, 3000, torch.device("cpu"), seed=5, pixels_per_point=4)
    assert a[0].shape[0] > 100
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
