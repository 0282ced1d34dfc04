"""The Renderer (nurec_usd.replay.Renderer): agreement with the training forward and with replay,
batches, output buffers reused from call to call, rig offsets, and actors removed, moved and
duplicated, in the image and in the lidar sweep.

Uses the session's build of samples/tiny (``tiny_run``), its USD folder copied away from the run
so that nothing but the USD is read. Cameras render at the build's downscale (160 x 90).
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from actor_box import returns_in_box
from conftest import QUICK, REPO

pytest.importorskip("pxr")

from nurec_usd.replay.renderer import Renderer, rig_offset_transform  # noqa: E402
from nurec_usd.replay.stage import Replay, ReplayError  # noqa: E402
from nurec_usd.train.metrics import psnr  # noqa: E402
from warp_kernels.compositing import ALPHA_MIN  # noqa: E402

K = QUICK["downscale"]
# The bar between the Renderer and the training forward (the same kernels; the rig, actor tracks
# and Gaussians read back from the USD in float32): as replay's, 50 dB.
FORWARD_PSNR_DB = 50.0
# The bars between the Renderer and replay at recorded poses. A global shutter camera's frame
# starts at a recorded key, where both read the same poses: equal but for float32 rounding. A
# rolling shutter's readout ends between keys, where USD interpolates the orient quaternion
# linearly without normalising it (GfSlerp's fallback for nearly equal quaternions) and turns it
# into a rotation through 2 acos(w): it overstates small rotations by up to ~1e-4 rad, which the
# Renderer's slerp does not (measured on the sample: 69.5 dB at worst, colour off by at most 0.0053
# but on the two outermost columns of the 200-degree f-theta lens, where a splat at the edge of its
# field of view flips in or out: 4 pixels off by 0.009-0.022).
# Float32 rounding can still flip a splat whose alpha at a pixel sits on the compositing cut-off
# (ALPHA_MIN): such a pixel changes by at most ALPHA_MIN (seen: 3 channels of one pixel, 0.0011).
GLOBAL_ATOL = 1e-5
CUTOFF_PIXELS = 4
ROLLING_PSNR_DB = 60.0
ROLLING_ATOL = 0.02
ROLLING_EDGE_ATOL = 0.05  # at most CUTOFF_PIXELS pixels between ROLLING_ATOL and this
CAMERAS = ["front", "front_left", "rear_fisheye", "right_ftheta"]


@pytest.fixture(scope="module")
def renderer(usd_only) -> Renderer:
    return Renderer(usd_only)


@pytest.fixture(scope="module")
def replay(usd_only) -> Replay:
    return Replay(usd_only)


@pytest.fixture
def fresh(renderer):
    """The module's renderer with its actors as recorded, before and after the test."""
    renderer.reset_actors()
    yield renderer
    renderer.reset_actors()


def actor_box(replay: Replay, actor: str, t: float, offset=(0.0, 0.0, 0.0)) -> tuple[np.ndarray, list[float]]:
    """An actor's box at ``t`` (box -> world, moved by a world offset) and its size (length, width, height)."""
    T = replay.world_pose(f"/World/Actors/{actor}", t).numpy().copy()
    T[:3, 3] += np.asarray(offset, dtype=np.float64)
    size = list(replay.stage.GetPrimAtPath(f"/World/Actors/{actor}").GetCustomDataByKey("nurec:sizeM"))
    return T, size


def in_box(renderer: Renderer, sweeps, lidar: str, t: float, box: tuple[np.ndarray, list[float]]) -> int:
    """Lidar returns (hit probability > 0.5) of sweep 0 of a call on the recorded rig path inside an
    actor's box. Points are placed with the lidar's pose at the sweep's start (the rig moves a few
    decimetres during the sweep: the box's margin covers it)."""
    s = sweeps.lidars[lidar]
    lid = renderer.lidars[lidar]
    dirs = lid.model.ray_directions().float()  # [C, W, 3]
    hit = (s.hit_prob[0] > 0.5) & (s.range[0] > 0)
    pts = (dirs[hit] * s.range[0][hit][:, None]).double()
    T = renderer.replay.world_pose(lid.path, t)
    return returns_in_box((pts @ T[:3, :3].T + T[:3, 3]).numpy(), *box)


@torch.no_grad()
def test_opened_from_a_run_folder_or_its_root_file(renderer, tiny_run, tmp_path):
    """The USD alone (the module's renderer), the run folder and root.usda itself open one scene."""
    first = renderer.render([0.3], cameras=["front"], lidars=["top"], downscale=4)
    want = first.cameras["front"].rgb.clone(), first.lidars["top"].range.clone()
    for where in (tiny_run, tiny_run / "usd" / "root.usda"):
        r = Renderer(where)
        assert r.root == tiny_run / "usd" / "root.usda" and r.actor_ids == renderer.actor_ids
        got = r.render([0.3], cameras=["front"], lidars=["top"], downscale=4)
        torch.testing.assert_close(got.cameras["front"].rgb, want[0], atol=1e-6, rtol=0)
        torch.testing.assert_close(got.lidars["top"].range, want[1], atol=1e-5, rtol=0)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ReplayError, match=r"empty: no root\.usda here or in .*empty/usd \(is it an export or run"):
        Renderer(empty)
    with pytest.raises(ReplayError, match=r"nowhere: no such file or folder"):
        Renderer(tmp_path / "nowhere")


# ---------------------------------------------------------------------------------------------
# Agreement


@torch.no_grad()
def test_batched_cameras_agree_with_the_training_forward(renderer, tiny_run):
    """actor_time="batch": every group of frames recorded together, drawn in one render_cameras call
    with the actors placed at the mean of the cameras' mid-readouts, as the training forward does."""
    from nurec_usd.capture.loader import load_capture
    from nurec_usd.render.scene_renderer import SceneRenderer
    from nurec_usd.scene.gaussians import Scene
    from nurec_usd.train.data import CaptureData

    model = SceneRenderer(Scene.load(tiny_run / "scene.pt"))
    data = CaptureData(load_capture(REPO / "samples" / "tiny"), "cpu", downscale=K)
    groups = data.groups(data.frames)
    worst = np.inf
    for group in groups[1:: max(1, len(groups) // 2)]:  # two of the ten instants
        ids = [data.cameras[ref.camera].id for ref in group.frames]
        t = {ref.time_s for ref in group.frames}
        assert len(t) == 1, "the sample's cameras start their frames together"
        want = model.cameras(data.camera_views(group)).image
        got = renderer.render(sorted(t), cameras=ids, downscale=K, actor_time="batch")
        for k, cam in enumerate(ids):
            image = got.cameras[cam].rgb[0]
            assert image.shape == want[k].shape == (90, 160, 3)
            assert float(want[k].std()) > 0.05
            worst = min(worst, float(psnr(image.clamp(0, 1), want[k].clamp(0, 1))))
    assert worst >= FORWARD_PSNR_DB, worst


@torch.no_grad()
def test_a_render_at_a_recorded_pose_equals_replay(renderer, replay):
    """actor_time="readout" on the recorded rig path is replay: every camera model and shutter, and
    the lidar (range, hit probability, intensity in capture units)."""
    for t in (0.0, 0.45):
        got = renderer.render([t], cameras=CAMERAS, lidars=["top"], downscale=K, retry_overflow=True)
        for cam in CAMERAS:
            want = replay.render_camera(cam, t, K)
            rolling = replay.cameras[cam].shutter != "global"
            off = (got.cameras[cam].rgb[0] - want).abs().amax(-1)  # [H, W]
            if rolling:
                assert float(off.max()) <= ROLLING_EDGE_ATOL and int((off > ROLLING_ATOL).sum()) <= CUTOFF_PIXELS, \
                    (cam, t, float(off.max()), int((off > ROLLING_ATOL).sum()))
            else:
                assert float(off.max()) <= ALPHA_MIN and int((off > GLOBAL_ATOL).sum()) <= CUTOFF_PIXELS, \
                    (cam, t, float(off.max()), int((off > GLOBAL_ATOL).sum()))
            if rolling:
                assert float(psnr(got.cameras[cam].rgb[0].clamp(0, 1), want.clamp(0, 1))) >= ROLLING_PSNR_DB
        want = replay.render_lidar("top", t)
        s = got.lidars["top"]
        scale = replay.lidars["top"].intensity_scale
        hit = want.hit_prob > 0.5
        assert float(hit.float().mean()) > 0.3
        assert float((s.hit_prob[0] - want.hit_prob).abs().max()) < 1e-3
        assert float((s.range[0] - want.range)[hit].abs().max()) < 1e-2  # metres
        torch.testing.assert_close(s.intensity[0], want.intensity * scale, atol=1e-3 * scale, rtol=0)
    assert not bool(got.overflow)


@torch.no_grad()
def test_depth_is_the_expected_camera_depth(renderer, replay):
    """depth=True: the training forward's depth image divided by its alpha; the colour is unchanged."""
    from nurec_usd.ops.camera import RenderSettings

    t = 0.4
    got = renderer.render([t], cameras=["front"], depth=True, downscale=K)
    plain = renderer.render([t], cameras=["front"], downscale=K)
    assert plain.cameras["front"].depth is None
    torch.testing.assert_close(got.cameras["front"].rgb, plain.cameras["front"].rgb, atol=0, rtol=0)
    view = replay.camera_view(replay.cameras["front"], t, K)
    raw = replay.renderer.camera(view, RenderSettings(depth=True), placed=replay.place(t)).raw
    alpha = raw.alpha[0]
    solid = alpha > 0.5
    want = raw.depth[0] / alpha.clamp_min(1e-3)
    d = got.cameras["front"].depth[0]
    assert float(solid.float().mean()) > 0.5
    torch.testing.assert_close(d[solid], want[solid], atol=5e-3, rtol=1e-3)
    assert float(d[solid].min()) > 0.5 and float(d[solid].max()) < 200.0  # metres in front of the camera
    assert bool((d[alpha < 1e-3] == 0).all())


@torch.no_grad()
def test_many_times_in_one_call_equal_one_call_each(renderer):
    times = [0.1, 0.5, 0.8]
    many = renderer.render(times, cameras=["front", "front_left"], lidars=["top"], downscale=4)
    many = {c: many.cameras[c].rgb.clone() for c in ("front", "front_left")} | {"top": many.lidars["top"].range.clone()}
    for i, t in enumerate(times):
        one = renderer.render([t], cameras=["front", "front_left"], lidars=["top"], downscale=4)
        for c in ("front", "front_left"):
            torch.testing.assert_close(one.cameras[c].rgb[0], many[c][i], atol=1e-6, rtol=0)
        torch.testing.assert_close(one.lidars["top"].range[0], many["top"][i], atol=1e-5, rtol=0)
    assert float((many["front"][0] - many["front"][2]).abs().max()) > 0.1  # the times differ


def test_outputs_are_reused_from_call_to_call(renderer, monkeypatch):
    """After the first call of a request the renderer makes no output tensors: a counting wrapper
    around its buffer maker, and the very same tensors returned, holding the latest call's values.
    On a GPU, no new device memory either."""
    made = []
    original = renderer._buffer

    def counting(*shape):
        made.append(shape)
        return original(*shape)

    monkeypatch.setattr(renderer, "_buffer", counting)
    request = dict(cameras=["front", "rear_fisheye"], lidars=["top"], downscale=4, depth=True)
    first = renderer.render([0.2, 0.3], **request)
    assert len(made) == 2 * 3 + 4  # per camera rgb, alpha, depth; per lidar four
    tensors = [first.cameras["front"].rgb, first.cameras["rear_fisheye"].depth, first.lidars["top"].range]
    pointers = [t.data_ptr() for t in tensors]
    before = tensors[0].clone()
    second = renderer.render([0.7, 0.8], **request)
    assert len(made) == 10, "the second call made output tensors"
    assert second is first
    again = [second.cameras["front"].rgb, second.cameras["rear_fisheye"].depth, second.lidars["top"].range]
    assert all(x is y for x, y in zip(again, tensors))
    assert [t.data_ptr() for t in tensors] == pointers
    assert float((tensors[0] - before).abs().max()) > 0.05, "the second call did not overwrite the first's frames"
    renderer.render([0.2, 0.3], cameras=["front"], downscale=4)  # another request: buffers of its own
    assert len(made) == 12


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_no_device_memory_after_the_first_call_on_a_gpu(usd_only):
    r = Renderer(usd_only, device="cuda")
    times = torch.tensor([0.2, 0.6], dtype=torch.float64, device="cuda")
    request = dict(cameras=CAMERAS, lidars=["top"], depth=True)
    for _ in range(3):  # sizes, then the grown capacities settle
        r.render(times, **request)
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats()
    for _ in range(5):
        r.render(times, **request)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats()
    for key in ("segment.all.allocated", "reserved_bytes.all.current"):
        assert after[key] == before[key], key


@torch.no_grad()
def test_rig_poses_given_as_tensors_and_offsets(renderer):
    """A [B, 4, 4] rig pose (held through the frame) equals the recorded path for a global shutter
    camera; rig_offset equals the same offset applied to the given pose; a lateral offset moves the
    view."""
    t = [0.4]
    recorded = renderer.render(t, cameras=["front"], downscale=K).cameras["front"].rgb.clone()
    T = renderer.rig_pose(t)  # [1, 4, 4]
    held = renderer.render(t, cameras=["front"], rig=T, downscale=K).cameras["front"].rgb
    torch.testing.assert_close(held, recorded, atol=1e-5, rtol=0)
    offset = rig_offset_transform(lateral_m=1.5, yaw_deg=5.0)
    a = renderer.render(t, cameras=["front"], rig_offset=offset, downscale=K).cameras["front"].rgb.clone()
    b = renderer.render(t, cameras=["front"], rig=T @ offset, downscale=K).cameras["front"].rgb
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
    assert float((a - recorded).abs().mean()) > 0.02
    moved = renderer.rig_pose(t, rig_offset=offset)[0]
    torch.testing.assert_close(moved[:3, 3], T[0, :3, 3] + 1.5 * T[0, :3, 1])  # along the rig's +y
    zero = renderer.render(t, cameras=["front"], rig_offset=rig_offset_transform(), downscale=K).cameras["front"].rgb
    torch.testing.assert_close(zero, recorded, atol=0, rtol=0)


def test_requests_are_checked(renderer):
    with pytest.raises(ReplayError, match=r"time 3\.000000 s is outside the scene's span"):
        renderer.render([3.0], cameras=["front"])
    with pytest.raises(ReplayError, match="'top' is a lidar, not a camera"):
        renderer.render([0.1], cameras=["top"])
    with pytest.raises(ReplayError, match="no sensor 'nope'"):
        renderer.render([0.1], lidars=["nope"])
    with pytest.raises(ValueError, match=r"rig must have shape \(2, 4, 4\)"):
        renderer.render([0.1, 0.2], cameras=["front"], rig=torch.eye(4)[None])
    with pytest.raises(ValueError, match="actor_time must be one of"):
        renderer.render([0.1], cameras=["front"], actor_time="middle")
    with pytest.raises(ReplayError, match=r"no actor 'car_99'; the scene has car_00, car_01"):
        renderer.remove_actor("car_99")


# ---------------------------------------------------------------------------------------------
# Actors


@torch.no_grad()
def test_removing_an_actor_removes_it_from_the_image_and_the_sweep(fresh, replay):
    r, t = fresh, 0.1  # car_00 (the lead car) drives ahead; car_01 has not arrived yet
    box = actor_box(replay, "car_00", t)
    full = r.render([t], cameras=["front"], lidars=["top"], downscale=K)
    image = full.cameras["front"].rgb[0].clone()
    seen = in_box(r, full, "top", t, box)
    assert seen > 20, "the lidar sees the car"
    r.remove_actor("car_01")  # not in the scene at t: nothing changes
    torch.testing.assert_close(r.render([t], cameras=["front"], downscale=K).cameras["front"].rgb[0], image,
                               atol=0, rtol=0)
    r.remove_actor("car_00")
    assert r.actor_ids == []
    gone = r.render([t], cameras=["front"], lidars=["top"], downscale=K)
    changed = (gone.cameras["front"].rgb[0] - image).abs().amax(-1) > 0.1
    assert int(changed.sum()) > 30, "the car's pixels did not change"
    assert in_box(r, gone, "top", t, box) <= seen // 20
    with pytest.raises(ReplayError, match=r"no actor 'car_00' \(removed: car_00, car_01\)"):
        r.shift_actor("car_00", (0, 1, 0))


@torch.no_grad()
def test_moving_an_actor_moves_its_pixels_and_returns(fresh, replay):
    """Shift car_00 by 1.5 m in world y: its pixels (those that change when it is removed) move by the
    projection of that offset, and its lidar returns follow it."""
    from nurec_usd.replay.renderer import _CV_TO_USD
    from nurec_usd.sensors.cameras import camera_model

    r, t = fresh, 0.1
    shift = torch.tensor([0.0, 1.5, 0.0], dtype=torch.float64)

    def render():
        out = r.render([t], cameras=["front"], lidars=["top"], downscale=K)
        return out.cameras["front"].rgb[0].clone(), out

    base, _ = render()
    r.remove_actor("car_00")
    empty, _ = render()
    r.reset_actors()
    r.shift_actor("car_00", shift)
    moved, sweeps = render()

    def centroid(img):  # [2] (u, v) of the pixels the car changes
        mask = (img - empty).abs().amax(-1) > 0.05
        assert int(mask.sum()) > 20
        v, u = torch.nonzero(mask, as_tuple=True)
        return torch.stack((u.double().mean(), v.double().mean()))

    cam = replay.cameras["front"]
    geo = r._camera_geometry(cam, K)
    model = camera_model(cam.model, geo.width, geo.height, geo.intrinsics, dtype=torch.float64)
    T_cam_world = torch.linalg.inv(replay.world_pose(cam.path, t) @ _CV_TO_USD)
    center = replay.world_pose("/World/Actors/car_00", t)[:3, 3]

    def project(p):
        uv, valid = model.project((T_cam_world[:3, :3] @ p + T_cam_world[:3, 3])[None])
        assert bool(valid.all())
        return uv[0]

    want = project(center + shift) - project(center)
    got = centroid(moved) - centroid(base)
    assert float(want.norm()) > 3.0, "the test's offset should move the car visibly"
    assert float((got - want).norm()) < 0.25 * float(want.norm()) + 1.0, (got, want)
    assert in_box(r, sweeps, "top", t, actor_box(replay, "car_00", t, shift.tolist())) > 20
    # what is left where the car was: its near side's footprint, now empty
    assert in_box(r, sweeps, "top", t, actor_box(replay, "car_00", t, (-shift).tolist())) < 3


@torch.no_grad()
def test_duplicating_an_actor_and_giving_one_a_new_track(fresh, replay):
    r, t = fresh, 0.1
    offset = (0.0, 4.0, 0.0)
    here, there = actor_box(replay, "car_00", t), actor_box(replay, "car_00", t, offset)
    assert r.duplicate_actor("car_00", offset) == "car_00_copy1"
    assert r.actor_ids == ["car_00", "car_01", "car_00_copy1"]
    out = r.render([t], lidars=["top"])
    assert in_box(r, out, "top", t, here) > 20
    assert in_box(r, out, "top", t, there) > 20
    # car_01 parked where the copy stood, over the whole capture: returns there at t, where it had none
    r.reset_actors()
    assert in_box(r, r.render([t], lidars=["top"]), "top", t, there) < 3
    T = torch.from_numpy(there[0]).repeat(2, 1, 1)
    r.set_actor_track("car_01", [0.0, 1.0], T)
    assert in_box(r, r.render([t], lidars=["top"]), "top", t, there) > 20
    with pytest.raises(ValueError, match=r"T_world_box must have shape \(2, 4, 4\)"):
        r.set_actor_track("car_01", [0.0, 1.0], T[:1])


def test_actors_are_found_by_track_id_before_prim_name(usd_only, tmp_path):
    """Track ids and prim names can cross (the exporter names a track "car-1" car_1 and a track "car_1"
    car_1_2; a hand-written stage can say anything): swap the sample's two track ids. A name is a
    track id first; a removed track is reported removed, never taken for another actor's prim name."""
    from pxr import Usd

    scene = tmp_path / "scene"
    shutil.copytree(usd_only, scene)
    stage = Usd.Stage.Open(str(scene / "actors.usdc"))
    for prim, track in (("car_00", "car_01"), ("car_01", "car_00")):
        stage.GetPrimAtPath(f"/World/Actors/{prim}").SetCustomDataByKey("nurec:trackId", track)
    stage.GetRootLayer().Save()
    r = Renderer(scene)
    assert r.actor_ids == ["car_01", "car_00"]
    r.remove_actor("car_00")  # the track car_00, drawn by the prim car_01
    assert r.actor_ids == ["car_01"]
    with pytest.raises(ReplayError, match=r"no actor 'car_00' \(removed: car_00\)"):
        r.remove_actor("car_00")
    assert r.actor_ids == ["car_01"]
    r.remove_actor("car_01")
    for name in ("car_00", "car_01"):
        with pytest.raises(ReplayError, match=rf"no actor '{name}' \(removed: car_01, car_00\)"):
            r.shift_actor(name, (0, 1, 0))


def test_two_actors_with_one_track_id_are_refused(usd_only, tmp_path):
    from pxr import Usd

    scene = tmp_path / "scene"
    shutil.copytree(usd_only, scene)
    stage = Usd.Stage.Open(str(scene / "actors.usdc"))
    stage.GetPrimAtPath("/World/Actors/car_01").SetCustomDataByKey("nurec:trackId", "car_00")
    stage.GetRootLayer().Save()
    with pytest.raises(ReplayError, match=r"/World/Actors/car_01: track id 'car_00' is also "
                                          r"/World/Actors/car_00's"):
        Renderer(scene)
